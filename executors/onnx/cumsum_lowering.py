"""A float CumSum over an axis of static length n, as a scan of shifted Adds: HTP declined the
CumSum of Mamba-2's chunked scan (its segment sums over 256 positions, along the last and the
second-to-last axis; onnxruntime-qnn 2.7.0). Slice, Pad and Add are what the scan needs,
all of which HTP runs.

y = x (x shifted one position first when `exclusive`), then, for s = 1, 2, 4, ... < n,
y = y + y shifted s positions along the axis (Slice, then Pad with zeros on the side it left;
towards the start when `reverse`): after the steps y[j] sums x[0..j] (x[j..n-1] reversed).
The sums are the same up to float rounding (added in another order), which legalize's check
of the fp32 outputs bounds.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from executors.onnx.graph_edit import (
    Emitter,
    drop_unread_initializers,
    elem_types,
    replace,
    with_constant_second,
)

FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def _shifted(e: Emitter, x: str, by: int, axis: int, dims: list[int], reverse: bool,
             output: str | None = None) -> str:
    """x moved `by` positions along `axis` (towards the end; the start when `reverse`), the
    positions it leaves zero."""
    n, rank = dims[axis], len(dims)
    bounds = [by, n] if reverse else [0, n - by]
    kept = e.node("Slice", [x, e.const(np.array(bounds[:1], np.int64), "starts"),
                            e.const(np.array(bounds[1:], np.int64), "ends"),
                            e.const(np.array([axis], np.int64), "axes")])
    pads = np.zeros(2 * rank, np.int64)
    pads[axis + rank if reverse else axis] = by
    return e.node("Pad", [kept, e.const(pads, "pads")], output, mode="constant")


def lower_cumsums(model: onnx.ModelProto) -> int:
    """Every float CumSum with a constant axis over a static shape -> Slices, Pads and Adds."""
    consts, found, known = with_constant_second(model, "CumSum")
    types = elem_types(model)
    count = 0
    for node in found:
        dims = known.get(node.input[0])
        if types.get(node.input[0]) not in FLOATS or not dims or None in dims:
            continue
        axis = int(np.asarray(consts[node.input[1]]).reshape(-1)[0]) % len(dims)
        attrs = {a.name: a.i for a in node.attribute}
        reverse, n = bool(attrs.get("reverse")), dims[axis]
        e = Emitter(model, node.name or node.output[0])
        y = _shifted(e, node.input[0], 1, axis, dims, reverse) \
            if attrs.get("exclusive") and n > 1 else node.input[0]
        steps = [1 << i for i in range(max(n - 1, 0).bit_length())]
        for i, by in enumerate(steps):
            y = e.node("Add", [y, _shifted(e, y, by, axis, dims, reverse)],
                       node.output[0] if i == len(steps) - 1 else None)
        if not steps and attrs.get("exclusive"):  # one position: zero (x * 0; NaN stays NaN)
            zero = np.zeros((), helper.tensor_dtype_to_np_dtype(types[node.input[0]]))
            e.node("Mul", [y, e.const(zero, "zero")], node.output[0])
        elif not steps:  # one position: the sum is the input
            e.node("Identity", [y], node.output[0])
        replace(model, node, e.nodes)
        drop_unread_initializers(model, [node.input[1]])
        count += 1
    return count
