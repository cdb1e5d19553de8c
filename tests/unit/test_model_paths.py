"""A `model.path` that is wrong says what is wrong with it: missing, no checkpoint, no file."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import ConfigError
from planner.models.sources import checkpoint_location


def model(source: str, path: str) -> dict[str, object]:
    return {"source": source, "path": path, "hub_id": "org/name"}


@pytest.mark.parametrize("source", ["local", "hub_cache"])
def test_a_checkpoint_path_that_does_not_exist_says_so(source: str, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-checkpoint"
    with pytest.raises(ConfigError) as err:
        checkpoint_location(model(source, str(missing)))
    assert str(err.value) == (f"model.path: '{missing}' does not exist; point it at a "
                              "checkpoint directory")


def test_a_relative_path_that_does_not_exist_says_where_it_was_looked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        checkpoint_location(model("onnx_file", "model.onnx"))
    assert str(err.value) == (f"model.path: 'model.onnx' does not exist (here: "
                              f"{tmp_path.resolve() / 'model.onnx'}); point it at an existing "
                              ".onnx model")


def test_a_folder_without_config_json_is_still_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"is not a Hugging Face checkpoint directory "
                                          r"\(no config.json\)"):
        checkpoint_location(model("local", str(tmp_path)))
