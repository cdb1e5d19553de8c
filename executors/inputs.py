"""Sample inputs for export checks, calibration, verification and perf: real sentences through
the model's own tokenizer when it has one, otherwise seeded random values inside each input
spec's value range. Attention masks always include padding so masking is exercised."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from executors.artifacts import load, model_meta

SENTENCES = Path(__file__).parent / "data" / "sentences.txt"
DTYPES = {"int64": np.int64, "int32": np.int32, "float32": np.float32, "float16": np.float16,
          "bool": np.bool_}
ONNX_DTYPES = {7: "int64", 6: "int32", 1: "float32", 10: "float16", 9: "bool"}


def io_specs(model_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Input and output specs: from the export's `winml.io.*` metadata, else from the graph."""
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


def tokenizer_dir(source: Path | None) -> Path | None:
    """The checkpoint directory of a resolve output, if it ships a tokenizer."""
    if source is None or not (source / "source.json").is_file():
        return None
    info = json.loads((source / "source.json").read_text())
    ckpt = info.get("checkpoint")
    if not ckpt:
        return None
    path = (source / ckpt) if not Path(ckpt).is_absolute() else Path(ckpt)
    has = any((path / f).is_file() for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"))
    return path if has else None


def batches(specs: list[dict[str, Any]], n: int, split: str, seed: int = 0,
            source: Path | None = None) -> list[dict[str, np.ndarray]]:
    """`n` input feeds. split: "calibration" or "verify" (disjoint sentences), "perf"."""
    tok = tokenizer_dir(source)
    names = {s["name"] for s in specs}
    if tok is not None and "input_ids" in names:
        return _text_batches(specs, tok, n, split)
    return _random_batches(specs, n, seed + {"calibration": 0, "verify": 1, "perf": 2}[split])


def _text_batches(specs: list[dict[str, Any]], tok_dir: Path, n: int,
                  split: str) -> list[dict[str, np.ndarray]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
    lines = [ln for ln in SENTENCES.read_text().splitlines() if ln.strip()]
    pool = lines[0::2] if split == "calibration" else lines[1::2]
    by_name = {s["name"]: s for s in specs}
    batch, seq = by_name["input_ids"]["shape"]
    feeds = []
    for i in range(n):
        texts = [pool[(i * batch + b) % len(pool)] for b in range(batch)]
        enc = tokenizer(texts, padding="max_length", truncation=True, max_length=seq,
                        return_tensors="np")
        feeds.append({name: enc[name].astype(DTYPES[s["dtype"]]) if name in enc
                      else np.zeros(s["shape"], DTYPES[s["dtype"]])
                      for name, s in by_name.items()})
    return feeds


def _random_batches(specs: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(n):
        feed = {}
        for s in specs:
            shape, dtype = s["shape"], DTYPES[s["dtype"]]
            if "mask" in s["name"] and len(shape) == 2:
                valid = rng.integers(max(1, shape[1] // 4), shape[1] + 1, size=shape[0])
                feed[s["name"]] = (np.arange(shape[1])[None, :] < valid[:, None]).astype(dtype)
            elif np.issubdtype(dtype, np.integer):
                feed[s["name"]] = rng.integers(int(s["min"]), int(s["max"]) + 1, size=shape,
                                               dtype=dtype)
            else:
                feed[s["name"]] = rng.uniform(s["min"], s["max"], size=shape).astype(dtype)
        feeds.append(feed)
    return feeds


def valid_positions(feed: dict[str, np.ndarray]) -> np.ndarray | None:
    """Boolean [batch, seq] of real (non-padding) tokens, when the inputs have a mask."""
    for name, value in feed.items():
        if "attention_mask" in name:
            return value.astype(bool)
    return None
