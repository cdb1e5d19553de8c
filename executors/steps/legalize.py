"""legalize{target}: rewrite what QNN HTP rejects. Attention-mask constants of -inf or
float-min are clamped to a finite floor, a mask `Where(cond, a, b)` over constants becomes
`Cast(cond) * (a - b) + b`, and the Erf-based GELU subgraph (HTP has no Erf) becomes one
Gelu node. The fp32 outputs on real (non-padding) tokens must not change."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from executors.artifacts import MODEL, load, save
from executors.base import StepContext, StepResult
from executors.samples import batches, io_specs, valid_positions

HUGE = -1e30           # a constant at or below this is a mask sentinel (-inf, float-min)
# Masked scores only need to vanish after softmax (e**-100 ~ 4e-44), and a small floor keeps
# the quantized range of the masked-score tensor tight. Measured on MiniLM (QDQ, CPU EP):
# floor -1e4 gives w8a8 cosine 0.49, floor -100 gives 0.83; w8a16 per-channel 0.999 either way.
FLOOR = -100.0
TOLERANCE = 1e-4
HTP_TARGETS = ("qnn_htp",)  # targets whose backend rejects Erf, mask sentinels and mask Where


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Every constant tensor by name: initializers and Constant node outputs."""
    out = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            out[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return out


def is_sentinel(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" and a.size > 0 and bool(np.any(a <= HUGE))


def clamp_constants(model: onnx.ModelProto) -> int:
    count = 0
    tensors = list(model.graph.initializer) + [
        n.attribute[0].t for n in model.graph.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"]
    for t in tensors:
        a = numpy_helper.to_array(t)
        if is_sentinel(a):
            t.CopyFrom(numpy_helper.from_array(np.maximum(a, FLOOR).astype(a.dtype), t.name))
            count += 1
    return count


def mask_wheres(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    consts = constants(model)
    return [n for n in model.graph.node if n.op_type == "Where"
            and n.input[1] in consts and n.input[2] in consts
            and consts[n.input[1]].dtype.kind == "f"
            and (is_sentinel(consts[n.input[1]]) or is_sentinel(consts[n.input[2]])
                 or _near_floor(consts[n.input[1]]) or _near_floor(consts[n.input[2]]))]


def _near_floor(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" and a.size > 0 and bool(np.any(a <= FLOOR))


def rewrite_wheres(model: onnx.ModelProto) -> int:
    consts = constants(model)
    targets = mask_wheres(model)
    nodes = list(model.graph.node)
    for where in targets:
        a = np.maximum(consts[where.input[1]], FLOOR)
        b = np.maximum(consts[where.input[2]], FLOOR)
        base = where.name or where.output[0]
        diff, offset = f"{base}/legalized_diff", f"{base}/legalized_offset"
        model.graph.initializer.extend([numpy_helper.from_array((a - b).astype(a.dtype), diff),
                                        numpy_helper.from_array(b.astype(b.dtype), offset)])
        cast = helper.make_node("Cast", [where.input[0]], [f"{base}/legalized_cond"],
                                name=f"{base}/legalized_Cast", to=helper.np_dtype_to_tensor_dtype(a.dtype))
        mul = helper.make_node("Mul", [cast.output[0], diff], [f"{base}/legalized_scaled"],
                               name=f"{base}/legalized_Mul")
        add = helper.make_node("Add", [mul.output[0], offset], [where.output[0]],
                               name=f"{base}/legalized_Add")
        i = nodes.index(where)
        nodes[i:i + 1] = [cast, mul, add]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return len(targets)


def fuse_erf_gelu(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Replace x * 0.5 * (1 + erf(x / sqrt 2)) subgraphs by a single Gelu node."""
    from onnxruntime.transformers.fusion_gelu import FusionGelu
    from onnxruntime.transformers.onnx_model import OnnxModel

    before = sum(n.op_type == "Erf" for n in model.graph.node)
    if not before:
        return model, 0
    wrapped = OnnxModel(model)
    FusionGelu(wrapped).apply()
    wrapped.prune_graph()
    wrapped.topological_sort()
    return wrapped.model, before - sum(n.op_type == "Erf" for n in wrapped.model.graph.node)


def violations(model: onnx.ModelProto, target: str) -> list[str]:
    """What `target` rejects in `model`, one line each naming the node or constant (the
    checker of the legal_for fact)."""
    if target not in HTP_TARGETS:
        return []
    found = [f"Erf node {n.name!r} (HTP has no Erf)" for n in model.graph.node
             if n.op_type == "Erf"]
    found += [f"mask constant {name!r} at or below {HUGE:g}"
              for name, a in constants(model).items() if is_sentinel(a)]
    found += [f"mask Where {n.name!r} over constants" for n in mask_wheres(model)]
    return found


def run(ctx: StepContext) -> StepResult:
    path = ctx.input_model()
    model = load(path)
    wheres = rewrite_wheres(model)
    clamped = clamp_constants(model)
    model, gelus = fuse_erf_gelu(model)
    left = violations(model, ctx.params["target"])
    if any(v.startswith("Erf") for v in left):
        raise ctx.fail(f"{left[0]}: it is not part of a GELU pattern",
                       "export the model with a tanh-approximated or native GELU")
    if left:
        raise ctx.fail(f"{left[0]} remains after legalization",
                       "report this model; legalize does not know its mask pattern")
    save(model, ctx.out / MODEL)
    max_abs = _outputs_unchanged(ctx, path)
    return StepResult(metrics={"wheres_rewritten": wheres, "constants_clamped": clamped,
                               "gelus_fused": gelus,
                               "max_abs_valid_tokens": max_abs, "floor": FLOOR})


def _outputs_unchanged(ctx: StepContext, before: Any) -> float:
    import onnxruntime as ort

    specs, _ = io_specs(before)
    worst = 0.0
    so = ort.SessionOptions()
    so.log_severity_level = 3
    # numerics only: the input is at the basic fixed point, and ORT 1.32's extended level
    # fails on some graphs its basic level wrote ("Attempt to replace the existing tensor")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    old = ort.InferenceSession(str(before), so, providers=["CPUExecutionProvider"])
    new = ort.InferenceSession(str(ctx.out / MODEL), so, providers=["CPUExecutionProvider"])
    for feed in batches(specs, 2, "verify", seed=7):
        valid = valid_positions(feed)
        for a, b in zip(old.run(None, feed), new.run(None, feed), strict=True):
            diff = np.abs(a - b)
            if valid is not None and diff.ndim >= 2 and diff.shape[:2] == valid.shape:
                diff = diff[valid]
            worst = max(worst, float(diff.max(initial=0.0)))
    if worst > TOLERANCE:
        raise ctx.fail(f"legalization changed outputs on real tokens by {worst:.3g} "
                       f"(tolerance {TOLERANCE})", "report this model")
    return worst
