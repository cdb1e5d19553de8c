"""Pooling forms the QNN EP's HTP backend declines or computes wrongly, rewritten to forms it
runs, exactly on fp32. Measured on the HTP simulator (onnxruntime-qnn 2.7.0, QNN 2.51; one
pooling node, QDQ with 16-bit activations, CPU fallback off, against the CPU EP):

* MaxPool with pads: quantized, HTP pads with zeros, not -inf (1-D k3 s2 p1 off by 0.97 on
  normal inputs, 2-D k3 s2 p1 by 0.08) -> the input's edges repeated (Slices and a Concat) +
  MaxPool without pads. Exact: ONNX keeps every pad below the kernel, so each padded window
  still holds the edge value it repeats. (Pad(mode=edge) would do on QDQ, but at fp16
  precision HTP gets Pad(edge) wrong by the same 0.97, and MaxPool's pads right.)
  Left alone when the input cannot be negative (after a Relu: ResNet's stem), where zeros are
  exact.
* AveragePool with count_include_pad=0 whose every window covers the whole input (a 3x3,
  pad 1 pool on a 1x1 map: PoolFormer's last stage on small images): HTP is off by 1.18 ->
  ReduceMean over the spatial axes (Expand to the output's size if it is larger than 1).
  The same for a pool without pads whose kernel passes the input (ceil_mode: EfficientNet's
  pooler, a 320x320 kernel on a 2x2 map), which the QNN EP declines after its NHWC layout
  transformation (compile fails); count_include_pad does not matter without pads.
* Dilated AveragePool or MaxPool: declined (assigned to the CPU) -> refused by the checker.

Accepted and exact on HTP: count_include_pad 0 or 1 with pads on maps of 2x2 and more,
ceil_mode, kernel equal to the input, 1-D and 3-D pooling, GlobalAveragePool and
GlobalMaxPool of rank 3, 4 and 5.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from executors.onnx.graph_edit import Emitter, attr, constants, replace, static_shapes

NON_NEGATIVE = ("Relu", "Sigmoid", "Softmax", "Abs", "Exp", "Sqrt")


def _explicit(node: onnx.NodeProto) -> bool:
    auto = attr(node, "auto_pad", b"NOTSET")
    return (auto.decode() if isinstance(auto, bytes) else auto) in ("NOTSET", "VALID")


def _non_negative(model: onnx.ModelProto, name: str) -> bool:
    producer = next((n for n in model.graph.node if name in n.output), None)
    if producer is None:
        return False
    if producer.op_type in NON_NEGATIVE:
        return True
    if producer.op_type == "Clip" and len(producer.input) > 1 and producer.input[1]:
        low = constants(model).get(producer.input[1])
        return low is not None and float(low) >= 0
    return False


def _slice(em: Emitter, x: str, axis: int, start: int, stop: int) -> str:
    return em.node("Slice", [x, *(em.const(np.array([v], np.int64), what) for v, what in
                                  ((start, "start"), (stop, "stop"), (axis, "axis")))])


def _edge_pad(em: Emitter, x: str, pads: list[int]) -> str:
    """`x` with its edges repeated `pads` times on each spatial axis (pads: ONNX pooling order,
    begins then ends), as Slices and a Concat per axis: HTP computes Pad(mode=edge) wrongly
    at fp16 precision (it pads with zeros there too)."""
    half = len(pads) // 2
    for a in range(half):
        begin, end = pads[a], pads[a + half]
        if not begin and not end:
            continue
        first = _slice(em, x, 2 + a, 0, 1) if begin else ""
        last = _slice(em, x, 2 + a, -1, np.iinfo(np.int64).max) if end else ""
        x = em.node("Concat", [first] * begin + [x] + [last] * end, axis=2 + a)
    return x


def pad_max_pools(model: onnx.ModelProto) -> int:
    """MaxPool(pads) over a possibly negative input -> edges repeated + MaxPool (no pads)."""
    count = 0
    for node in [n for n in model.graph.node if n.op_type == "MaxPool"]:
        pads = list(attr(node, "pads", []))
        if not any(pads) or not _explicit(node) or len(node.output) > 1 and node.output[1] \
                or any(d > 1 for d in attr(node, "dilations", [])) \
                or _non_negative(model, node.input[0]):
            continue
        em = Emitter(model, node.name or node.output[0])
        padded = _edge_pad(em, node.input[0], pads)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                 if a.name not in ("pads", "auto_pad")}
        em.nodes.append(helper.make_node("MaxPool", [padded], [node.output[0]],
                                         name=f"{em.base}/unpadded", **attrs))
        replace(model, node, em.nodes)
        count += 1
    return count


def _covers_input(node: onnx.NodeProto, spatial: list[int], outs: list[int]) -> bool:
    """Whether every window of the pool holds the whole (unpadded) input."""
    kernel = list(attr(node, "kernel_shape", []))
    strides = list(attr(node, "strides", [1] * len(kernel)))
    pads = list(attr(node, "pads", [0] * 2 * len(kernel)))
    for axis, (n, k, s, m) in enumerate(zip(spatial, kernel, strides, outs, strict=True)):
        starts = [j * s - pads[axis] for j in range(m)]
        if any(start > 0 or start + k < n for start in starts):
            return False
    return True


def global_average_pools(model: onnx.ModelProto) -> int:
    """AveragePool (count_include_pad=0, or no pads) whose windows all cover the input ->
    ReduceMean."""
    pools = [n for n in model.graph.node if n.op_type == "AveragePool"
             and (not attr(n, "count_include_pad", 0) or not any(attr(n, "pads", [])))
             and _explicit(n)
             and not any(d > 1 for d in attr(n, "dilations", []))]
    if not pools:
        return 0
    known = static_shapes(model, [n for p in pools for n in (p.input[0], p.output[0])])
    count = 0
    for node in pools:
        shape, out = known.get(node.input[0]), known.get(node.output[0])
        if not shape or not out or None in shape or None in out \
                or not _covers_input(node, shape[2:], out[2:]):
            continue
        em = Emitter(model, node.name or node.output[0])
        axes = list(range(2, len(shape)))
        if all(d == 1 for d in out[2:]):
            em.reduce("ReduceMean", node.input[0], axes, 1, node.output[0])
        else:
            mean = em.reduce("ReduceMean", node.input[0], axes, 1)
            em.node("Expand", [mean, em.const(np.array(out, np.int64), "shape")],
                    node.output[0])
        replace(model, node, em.nodes)
        count += 1
    return count


def declined(model: onnx.ModelProto) -> list[str]:
    """Pooling nodes in a form HTP declines that no rewrite here takes, one line each."""
    return [f"dilated {n.op_type} node {n.name!r} (HTP declines dilated pooling)"
            for n in model.graph.node if n.op_type in ("AveragePool", "MaxPool")
            and any(d > 1 for d in attr(n, "dilations", []))]
