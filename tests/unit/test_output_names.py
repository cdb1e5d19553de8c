"""Output folder names come from the model itself."""

from __future__ import annotations

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
    ({"source": "packaged", "name": "minilm"}, "minilm-w8a8-cpu"),
    ({"source": "random_init", "name": "tiny_bert"}, "tiny_bert-w8a8-cpu"),
    ({"source": "local", "path": "/"}, "model-w8a8-cpu"),
])
def test_the_folder_is_named_after_the_model(model: dict[str, Any], name: str) -> None:
    assert run_name(config(**model)) == name


def test_relative_paths_name_their_folder(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_name(config(path=".")) == f"{tmp_path.name}-w8a8-cpu"


@pytest.mark.parametrize("bad", ["", ".", "..", ".hidden", "a/b", "x" * 300, "a\0b"])
def test_bad_run_names_are_refused(bad: str) -> None:
    with pytest.raises(UsageError, match="one folder name under --outputs"):
        check_name(bad)
