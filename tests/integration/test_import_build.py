"""Imported winml-cli recipes build: for each model type in the corpus that modelplan builds,
one recipe imported with `modelplan import` runs end to end with a tiny random checkpoint of
that type (`model.path=`), for the recipe's own target and precision, with the recipe's input
names and dtypes in the deliverable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.integration.conftest import run_json
from tests.recipe_models import BUILDS, SKIP_WHY, checkpoint_for, corpus_dir

CORPUS = corpus_dir()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(CORPUS is None, reason=SKIP_WHY)]
# eval=none: an imported eval section names a hub dataset this machine does not have
FAST = ("verify.samples=2", "perf.iterations=2", "perf.warmup=0", "perf.profile_runs=1",
        "eval=none")
ONNX_TYPES = {6: "int32", 7: "int64", 1: "float32", 10: "float16"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    conf = tmp_path_factory.mktemp("imported") / "conf"
    result = run_cli("import", str(CORPUS), "-o", str(conf), "--json")
    assert result.stdout.startswith("["), result.stderr
    return {"conf": conf, "builds": json.loads(result.stdout),
            "store": tmp_path_factory.mktemp("store")}


@pytest.mark.parametrize("model_type", sorted(BUILDS))
def test_an_imported_recipe_builds(tree: dict[str, Any], model_type: str,
                                   tmp_path: Path) -> None:
    import onnx

    assert CORPUS is not None
    entry = next(b for b in tree["builds"] if BUILDS[model_type] in b["recipes"])
    assert entry["status"] == "imported", entry["message"]
    ckpt = checkpoint_for([CORPUS / r for r in entry["recipes"]], tmp_path / "checkpoint")
    code, record, err = run_json("--config-dir", str(tree["conf"]), "--config-name",
                                 entry["config_name"], f"model.path={ckpt}", *FAST,
                                 store=tree["store"], outputs=tmp_path / "out")
    assert code == 0, err
    ops = {s["op"]: s for s in record["steps"]}
    assert ("compile" in ops) == (entry["target"] == "qnn_htp")
    assert ("quantize" in ops) == (entry["precision"] != "fp32")
    assert ops["verify"]["metrics"]["passed"]
    recipe = json.loads((CORPUS / entry["recipes"][0]).read_text())
    if len(entry["recipes"]) == 1:  # the recipe's own input names and dtypes
        model = onnx.load(record["published"]["model.onnx"], load_external_data=False)
        got = {i.name: ONNX_TYPES[i.type.tensor_type.elem_type] for i in model.graph.input}
        want = {t["name"]: t["dtype"] for t in recipe["export"]["input_tensors"]}
        assert got == want
