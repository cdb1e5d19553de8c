"""A set of models in one step output: the pieces `extract` cuts, one per matched module.

`pieces.json` lists them; each piece is a directory laid out like any model output
(`model.onnx`, stamped with facts), with `inputs.npz`, the values its inputs had when the whole
model ran on a sample input, so it can be run alone on realistic data. An output without
`pieces.json` is one model, in the output directory itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: a fully cached run never loads numpy
    import numpy as np

PIECES = "pieces.json"
FEEDS = "inputs.npz"


def model_dirs(path: Path) -> list[Path]:
    """The directories of the models in a step output: its pieces, or the output itself."""
    index = path / PIECES
    if not index.is_file():
        return [path]
    return [path / p["dir"] for p in json.loads(index.read_text())["pieces"]]


def index(path: Path) -> dict[str, Any] | None:
    """A piece set's index (None for a single model)."""
    found = path / PIECES
    return json.loads(found.read_text()) if found.is_file() else None


def write_index(out: Path, data: dict[str, Any]) -> None:
    (out / PIECES).write_text(json.dumps(data, indent=1, sort_keys=True))


def feeds(model_dir: Path) -> dict[str, np.ndarray] | None:
    """The recorded input values of a piece (None when there are none)."""
    import numpy as np

    found = model_dir / FEEDS
    if not found.is_file():
        return None
    with np.load(found) as data:
        return {str(name): data[f"arr_{i}"] for i, name in enumerate(data["names"])}


def save_feeds(model_dir: Path, values: dict[str, np.ndarray]) -> None:
    import numpy as np

    # tensor names ("/model/...") are not safe archive member names: store them beside
    np.savez(model_dir / FEEDS, *values.values(), names=np.array(list(values), dtype=str))


def carry(src: Path, dst: Path) -> None:
    """Copy what travels with a model from one step to the next: the recorded inputs."""
    if (src / FEEDS).is_file():
        shutil.copy2(src / FEEDS, dst / FEEDS)
