"""Gemm forms the QNN EP's HTP backend declines, rewritten to forms it runs, exactly on fp32.
Measured on the HTP simulator (onnxruntime-qnn 2.7.0; one Gemm [4, 32] x [32, 64], QDQ with
16-bit activations and 8-bit per-channel weights, CPU fallback off): HTP takes a Gemm with
alpha 1 and no C, or a constant C at beta 1, with transB 0 or 1; it declines (assigns to the
CPU):

* a Gemm whose C is computed, not a constant. ONNX Runtime's MatMulAddFusion writes one
  wherever a MatMul's product is added to another tensor: a mixture-of-experts block's shared
  expert's projection added to the routed experts' sum (LaraMini), a residual;
* a Gemm with alpha other than 1, with or without C (torch.addmm's scaled forms).

Such a Gemm becomes Gemm(A, B) at alpha 1 without C, then a Mul by alpha where alpha is not 1,
then Add(., beta * C) (the constant folded, a computed C multiplied first); a transposed A
(transA) is transposed first. Exact up to fp32 rounding: Gemm computes alpha * A'B' + beta * C,
broadcasting C to the product's shape as the Add does.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from executors.onnx.graph_edit import (
    attr,
    constants,
    drop_dead,
    drop_unread_initializers,
    replace,
    types_of,
)
from executors.onnx.htp_math import FLOATS


def declined(node: onnx.NodeProto, consts: dict) -> bool:
    """Whether HTP declines this Gemm as written."""
    c = node.input[2] if len(node.input) > 2 else ""
    return attr(node, "alpha", 1.0) != 1.0 or bool(attr(node, "transA", 0)) \
        or (bool(c) and (c not in consts or attr(node, "beta", 1.0) != 1.0))


def gemms_htp_takes(model: onnx.ModelProto) -> int:
    """Every Gemm HTP declines -> [Transpose(A)], Gemm(A, B) at alpha 1, [Mul by alpha],
    [Add(., beta * C)]. A node whose A is not float (or of a type the graph does not say) is
    left."""
    consts = constants(model)
    found = [n for n in model.graph.node if n.op_type == "Gemm" and declined(n, consts)]
    types = types_of(model, [n.input[0] for n in found])
    count, folded = 0, []
    for node in found:
        if types.get(node.input[0]) not in FLOATS:  # unsaid, or an integer Gemm (no HTP's)
            continue
        dtype = helper.tensor_dtype_to_np_dtype(types[node.input[0]])
        model.graph.initializer.extend(_scalars(node, dtype, consts))
        replace(model, node, _split(node, consts))
        folded.extend(node.input[2:3])
        count += 1
    if count:
        drop_dead(model)  # a constant C's Constant node, folded into beta * C
        drop_unread_initializers(model, folded)
    return count


def _scalars(node: onnx.NodeProto, dtype: np.dtype, consts: dict) -> list[onnx.TensorProto]:
    """alpha where it is not 1; beta * C where C is a constant (folded), beta alone where C is
    computed and beta is not 1."""
    base, out = node.name or node.output[0], []
    alpha, beta = attr(node, "alpha", 1.0), attr(node, "beta", 1.0)
    c = node.input[2] if len(node.input) > 2 else ""
    if alpha != 1.0:
        out.append(numpy_helper.from_array(np.array(alpha, dtype), f"{base}/alpha"))
    if c and c in consts:
        out.append(numpy_helper.from_array((consts[c] * np.array(beta, dtype)).astype(dtype),
                                           f"{base}/beta_C"))
    elif c and beta != 1.0:
        out.append(numpy_helper.from_array(np.array(beta, dtype), f"{base}/beta"))
    return out


def _split(node: onnx.NodeProto, consts: dict) -> list[onnx.NodeProto]:
    """The nodes that replace `node`: a chain whose last node writes the Gemm's output."""
    base, c = node.name or node.output[0], node.input[2] if len(node.input) > 2 else ""
    nodes, a = [], node.input[0]
    if attr(node, "transA", 0):
        nodes.append(helper.make_node("Transpose", [a], [f"{base}/A_T"], name=f"{base}/A_T",
                                      perm=[1, 0]))
        a = f"{base}/A_T"
    chain = [("product", "Gemm", [a, node.input[1]], {"transB": int(attr(node, "transB", 0))})]
    if attr(node, "alpha", 1.0) != 1.0:
        chain.append(("times_alpha", "Mul", [f"{base}/alpha"], {}))
    if c:
        if c not in consts and attr(node, "beta", 1.0) != 1.0:
            nodes.append(helper.make_node("Mul", [f"{base}/beta", c], [f"{base}/beta_C"],
                                          name=f"{base}/beta_C"))
        folded = c in consts or attr(node, "beta", 1.0) != 1.0
        chain.append(("plus_C", "Add", [f"{base}/beta_C" if folded else c], {}))
    previous: list[str] = []
    for i, (name, op, inputs, attrs) in enumerate(chain):
        out = list(node.output) if i == len(chain) - 1 else [f"{base}/{name}"]
        nodes.append(helper.make_node(op, previous + inputs, out, name=f"{base}/{name}",
                                      **attrs))
        previous = out[:1]
    return nodes
