"""The winml-cli recipe corpus (136 real recipes, 59 models) through `modelplan import`: every
recipe imports into a valid config or fails with one line naming the field and why, and every
field of every imported recipe is accounted for. Planner-side only: nothing is built."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.recipe_models import SKIP_WHY, corpus_dir
from tests.unit.test_import import covered, leaves, no_datasets

CORPUS = corpus_dir()
pytestmark = pytest.mark.skipif(CORPUS is None, reason=SKIP_WHY)
ONE_LINE = re.compile(r"^[^:\n]+: [^\n]+$")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("corpus")
    conf = root / "conf"
    result = run_cli("import", str(CORPUS), "-o", str(conf), "--json", env=no_datasets(root))
    assert result.stdout.startswith("["), result.stderr
    return {"conf": conf, "builds": json.loads(result.stdout), "code": result.returncode}


def test_every_recipe_imports_or_says_which_field_and_why(corpus: dict[str, Any]) -> None:
    assert CORPUS is not None
    builds = corpus["builds"]
    files = Counter()
    for b in builds:
        files[b["status"]] += len(b["recipes"])
    on_disk = [p for p in CORPUS.rglob("*.json") if "_config" in p.stem]
    assert sum(files.values()) == len(on_disk) == 136
    assert files == {"imported": 122, "unsupported": 14}
    assert corpus["code"] == 1  # a tree with unsupported recipes is not all done
    for b in builds:
        if b["status"] == "imported":
            assert (corpus["conf"] / f"{b['config_name']}.yaml").is_file()
        else:
            assert ONE_LINE.match(b["message"]), b["message"]
    reasons = Counter(b["message"].split(":")[0] for b in builds if b["status"] != "imported")
    assert reasons == {"folder dml/gpu": 6, "loader.model_type": 8}  # per build


def test_every_field_of_every_imported_recipe_is_accounted_for(corpus: dict[str, Any]) -> None:
    assert CORPUS is not None
    for b in corpus["builds"]:
        if b["status"] != "imported":
            continue
        pair = len(b["recipes"]) > 1
        fields = {f["field"] for f in b["fields"]}
        for rel in b["recipes"]:
            recipe = json.loads((CORPUS / rel).read_text())
            role = re.search(r"(encoder|decoder)", Path(rel).stem)
            prefix = f"{role.group(1)}:" if pair and role else ""
            missing = [p for p in leaves(recipe) if not covered(prefix + p, fields)]
            assert not missing, f"{rel}: {missing}"
        assert all(f["outcome"] == "mapped" or f["note"] for f in b["fields"])


def test_imported_configs_plan(corpus: dict[str, Any], tmp_path: Path) -> None:
    """One config per target, precision and kind of model plans (symbolic sources: the real
    checkpoints are not here)."""
    seen: dict[tuple[str, str, bool], str] = {}
    for b in corpus["builds"]:
        if b["status"] == "imported":
            seen.setdefault((b["target"], b["precision"], len(b["recipes"]) > 1),
                            b["config_name"])
    assert len(seen) >= 6
    for key, name in sorted(seen.items()):
        result = run_cli("plan", "--config-dir", str(corpus["conf"]), "--config-name", name,
                         "--symbolic-sources", "--store", str(tmp_path))
        assert result.returncode == 0, f"{key} {name}: {result.stderr}"
        assert "From winml-cli recipe" in result.stdout
        assert ("compile" in result.stdout) == (key[0] == "qnn_htp")
        assert ("+ eval " in result.stdout) == ("gate: " in result.stdout)


def test_eval_sections_become_eval_task(corpus: dict[str, Any]) -> None:
    """Every eval section's dataset is mapped to eval.dataset.* or dropped with the reason, and
    each dataset that is not on this machine is reported once per build (none is cached here)."""
    assert CORPUS is not None
    warned = 0
    for b in corpus["builds"]:
        if b["status"] != "imported":
            continue
        evals = [f for f in b["fields"] if f["field"].split(":")[-1].startswith("eval")]
        assert all(f["config"] is None or f["config"].startswith("eval") for f in evals)
        assert all(f["outcome"] == "mapped" or f["note"] for f in evals)
        paths = [f for f in evals if f["field"].endswith("eval.dataset.path")]
        assert len(b["warnings"]) == len({f["value"] for f in paths})
        assert all("is not available offline; `modelplan plan` fails until" in w
                   for w in b["warnings"])
        warned += bool(b["warnings"])
    assert warned == 68  # 72 eval sections; the 4 of CLIP towers evaluate another pipeline
