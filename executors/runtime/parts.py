"""A graph split into parts (the split step) run as one session: each part in order, the
tensors one part makes handed to the parts that read them. `run`, `get_inputs` and
`get_outputs` behave as a session of the whole graph."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import MODEL
from executors.onnx.pieces import PIECES


@dataclass(frozen=True)
class Arg:
    """What a session's get_inputs()/get_outputs() give: a name, a shape, a type."""

    name: str
    shape: list[int]
    type: str


def index(model_path: Path) -> dict[str, Any] | None:
    """The parts index of a split graph (None when `model_path` is one model): a step's
    output folder holds it as pieces.json beside the parts' folders (`model_path` is the
    folder's model.onnx, which a split graph does not have); a bundle names it itself."""
    if model_path.suffix == ".json":
        found = model_path
    elif model_path.is_file():
        return None
    else:
        found = model_path.parent / PIECES
    if not found.is_file():
        return None
    data = json.loads(found.read_text())
    return data if data.get("parts") else None


def part_path(folder: Path, part: dict[str, Any]) -> Path:
    """A part's model: named in the index (a bundle's flat files), else in its folder."""
    return folder / (part.get("model") or f"{part['dir']}/{MODEL}")


_ONNX_TYPES = {"float32": "tensor(float)", "int64": "tensor(int64)", "int32": "tensor(int32)",
               "float16": "tensor(float16)", "bool": "tensor(bool)"}


class PartsSession:
    def __init__(self, folder: Path, found: dict[str, Any],
                 open_one: Callable[[Path], Any]) -> None:
        self.parts = [(p, open_one(part_path(folder, p))) for p in found["pieces"]]
        io = found["io"]
        self.inputs = [Arg(s["name"], s["shape"], _ONNX_TYPES.get(s["dtype"], "tensor(float)"))
                       for s in io["inputs"]]
        self.outputs = [Arg(s["name"], s.get("shape", []),
                            _ONNX_TYPES.get(s.get("dtype", "float32"), "tensor(float)"))
                        for s in io["outputs"]]

    def get_inputs(self) -> list[Arg]:
        return self.inputs

    def get_outputs(self) -> list[Arg]:
        return self.outputs

    def run(self, names: list[str] | None, feed: dict[str, Any]) -> list[Any]:
        pool = dict(feed)
        for part, session in self.parts:
            got = session.run(part["outputs"], {x: pool[x] for x in part["inputs"]})
            pool.update(zip(part["outputs"], got, strict=True))
        return [pool[n] for n in (names or [o.name for o in self.outputs])]
