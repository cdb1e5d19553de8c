"""A graph's input and output specs (name, dtype, shape, value range, kind) as the export
recorded them, and what kind of value feeds an input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import load, model_meta

ONNX_DTYPES = {7: "int64", 6: "int32", 1: "float32", 10: "float16", 9: "bool"}


def io_specs(model_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Input and output specs: from the export's `winml.io.*` metadata, else from the graph;
    a split graph's from its parts index."""
    split = model_path if model_path.suffix == ".json" else model_path.parent / "pieces.json"
    if (not model_path.is_file() or model_path.suffix == ".json") and split.is_file():
        io = json.loads(split.read_text()).get("io")
        if io is not None:
            return io["inputs"], io["outputs"]
    model = load(model_path, external=False)
    meta = model_meta(model)
    if "winml.io.inputs" in meta:
        return json.loads(meta["winml.io.inputs"]), json.loads(meta.get("winml.io.outputs", "[]"))
    inits = {i.name for i in model.graph.initializer}

    def spec(v: Any, lo: float, hi: float) -> dict[str, Any]:
        shape = [d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
        return {"name": v.name, "dtype": ONNX_DTYPES.get(v.type.tensor_type.elem_type, "float32"),
                "shape": shape, "min": lo, "max": hi}

    ins = [spec(v, *_range_for(v.name)) for v in model.graph.input if v.name not in inits]
    return ins, [spec(v, 0, 0) for v in model.graph.output]


def _range_for(name: str) -> tuple[int, int]:
    lowered = name.lower()
    if "mask" in lowered or "type" in lowered:
        return 0, 1
    if "ids" in lowered:
        return 0, 99
    return 0, 1


def kind_of(spec: dict[str, Any]) -> str:
    """What feeds an input: its spec's kind, else what its name says (user specs, ONNX files)."""
    if spec.get("kind"):
        return spec["kind"]
    by_name = {"input_ids": "token_ids", "attention_mask": "attention_mask",
               "token_type_ids": "token_types", "bbox": "boxes", "pixel_values": "pixels",
               "encoder_hidden_states": "encoder_hidden_states",
               "encoder_attention_mask": "encoder_attention_mask",
               "input_features": "mel_features"}
    if spec["name"] == "input_values":
        return "waveform" if len(spec["shape"]) == 2 else "spectrogram"
    return by_name.get(spec["name"], "values")
