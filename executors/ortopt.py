"""ONNX Runtime graph optimization run to a fixed point (one pass is not always enough:
on ORT 1.32 a second basic pass still rewrites a freshly exported BERT)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx

from executors.artifacts import load, save

MAX_PASSES = 8


def graph_digest(model: onnx.ModelProto) -> str:
    return hashlib.sha256(model.graph.SerializeToString(deterministic=True)).hexdigest()


def ort_pass(src: Path, dst: Path) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])


def basic_fixed_point(model: onnx.ModelProto, work: Path) -> tuple[onnx.ModelProto, int]:
    """Apply ORT basic optimizations until the graph digest stops changing.
    Returns the model (with shapes inferred) and the number of passes that changed it."""
    current = work / "pass_0.onnx"
    save(model, current)
    digest, passes = graph_digest(model), 0
    for i in range(1, MAX_PASSES + 1):
        nxt = work / f"pass_{i}.onnx"
        ort_pass(current, nxt)
        new = load(nxt)
        new_digest = graph_digest(new)
        current.unlink()
        current = nxt
        if new_digest == digest:
            break
        digest, passes = new_digest, i
    else:
        raise RuntimeError(f"ORT basic optimization did not converge in {MAX_PASSES} passes")
    result = onnx.shape_inference.infer_shapes(load(current), data_prop=True)
    current.unlink()
    for meta in model.metadata_props:  # keep the model-level metadata ORT may not carry over
        if meta.key not in {p.key for p in result.metadata_props}:
            result.metadata_props.add(key=meta.key, value=meta.value)
    return result, passes
