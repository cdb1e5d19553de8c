"""Element-wise functions HTP lacks or computes wrongly, composed of operators it computes
right (each measured on the HTP simulator, onnxruntime-qnn 2.7.0; executors/onnx/htp_rewrites.py
applies them in its REWRITES order): Reciprocal as a Div, Softplus and log-sigmoid without a
Log, ReduceLogSumExp about its maximum, an outer product written as a broadcast Mul as a MatMul,
a Mul's broadcast operand first, the norms ReduceL1, ReduceL2 and ReduceSumSquare as ReduceSum,
a Sub of a constant as an Add of its negation."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from executors.onnx.graph_edit import (
    Emitter,
    constants,
    drop_unread_initializers,
    replace,
    static_shapes,
    types_of,
)
from executors.onnx.graph_edit import shapes as graph_shapes


def reciprocals_as_divs(model: onnx.ModelProto) -> int:
    """Reciprocal(x) -> Div(1, x): HTP's 16-bit Reciprocal of small inputs is wrong (measured:
    the rsqrt of torch.export's RMSNorm, Reciprocal(Sqrt), on GLM-4's tiny checkpoint gave
    1.43 for 58.5, 41x low, and the prompt graph's cosine 0.53); its Div is right, and
    TorchScript exports rsqrt as that Div. The constant 1 takes the input's type; a node whose
    input type stays unknown is left."""
    count = 0
    found = [n for n in model.graph.node if n.op_type == "Reciprocal"]
    types = types_of(model, [n.input[0] for n in found])
    for node in found:
        if not types.get(node.input[0]):
            continue
        base = node.name or node.output[0]
        dtype = helper.tensor_dtype_to_np_dtype(types[node.input[0]])
        model.graph.initializer.append(numpy_helper.from_array(np.array(1, dtype), f"{base}/one"))
        replace(model, node, [helper.make_node("Div", [f"{base}/one", node.input[0]],
                                               list(node.output), name=f"{base}/as_Div")])
        count += 1
    return count


# log1p(u) = 2 atanh(z), z = u / (2 + u): 2 (z + z^3/3 + ... + z^9/9), within 1.1e-6 for u <= 1
LOG1P_SERIES = (2 / 9, 2 / 7, 2 / 5, 2 / 3, 2.0)


def softplus_composed(model: onnx.ModelProto) -> int:
    """Softplus(x) -> Relu(x) + log1p(Exp(-|x|)), the log1p as its odd series in
    z = u / (2 + u): HTP has no Softplus (the state-space layers of Mamba and its hybrids take
    their step size through it), and its 16-bit Log of inputs near 1 is wrong (log(0.998) came
    out as the bottom of its range, for every input: measured on Mamba-2, whose step sizes are
    mostly below 0.01: with each Log form tried its recurrent state came out zero or constant)."""
    found = [n for n in model.graph.node if n.op_type == "Softplus"]
    types = types_of(model, [n.input[0] for n in found])
    for node in found:
        e = Emitter(model, node.name or node.output[0])
        x = node.input[0]
        _softplus(e, x, helper.tensor_dtype_to_np_dtype(types.get(x, onnx.TensorProto.FLOAT)),
                  node.output[0])
        replace(model, node, e.nodes)
    return len(found)


def log_sigmoids_composed(model: onnx.ModelProto) -> int:
    """Log(Sigmoid(x)) (torch's logsigmoid) -> -Softplus(-x), composed as above: HTP's 16-bit
    Log gave the bottom of its range for every input here too (Inkling's MoE gate: sigmoids
    over 0.45-0.59, their Log constant at -0.806 on HTP). A Sigmoid nothing else reads goes."""
    made = {o: n for n in model.graph.node for o in n.output}
    found = [n for n in model.graph.node if n.op_type == "Log" and n.input[0] in made
             and made[n.input[0]].op_type == "Sigmoid"]
    types = types_of(model, [made[n.input[0]].input[0] for n in found])
    for node in found:
        sigmoid = made[node.input[0]]
        e = Emitter(model, node.name or node.output[0])
        x = sigmoid.input[0]
        dtype = helper.tensor_dtype_to_np_dtype(types.get(x, onnx.TensorProto.FLOAT))
        e.node("Neg", [_softplus(e, e.node("Neg", [x]), dtype)], node.output[0])
        replace(model, node, e.nodes)
        if sigmoid in model.graph.node and not any(
                sigmoid.output[0] in n.input for n in model.graph.node) and \
                sigmoid.output[0] not in {o.name for o in model.graph.output}:
            model.graph.node.remove(sigmoid)
    return len(found)


def _softplus(e: Emitter, x: str, dtype: Any, output: str | None = None) -> str:
    """Relu(x) + log1p(Exp(-|x|)), the log1p as its series (no Log)."""
    u = e.node("Exp", [e.node("Neg", [e.node("Abs", [x])])])
    z = e.node("Div", [u, e.node("Add", [e.const(np.array(2, dtype), "two"), u])])
    z2 = e.node("Mul", [z, z])
    acc = e.const(np.array(LOG1P_SERIES[0], dtype), "c")
    for c in LOG1P_SERIES[1:]:
        acc = e.node("Add", [e.const(np.array(c, dtype), "c"), e.node("Mul", [z2, acc])])
    return e.node("Add", [e.node("Relu", [x]), e.node("Mul", [z, acc])], output)


def logsumexps_composed(model: onnx.ModelProto) -> int:
    """ReduceLogSumExp(x) -> m + Log(ReduceSum(Exp(x - m))), m = ReduceMax(x) with the reduced
    axes kept: HTP has no ReduceLogSumExp (Inkling's MoE gate normalizes its router's scores
    with torch.logsumexp). No Exp overflows, and the Log's input is at least 1 (what it adds
    to m is under log n for n reduced values). The axes as an input (opset 18) or an
    attribute; a node that reduces nothing (noop_with_empty_axes) is left."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 18)
    found = [n for n in model.graph.node if n.op_type == "ReduceLogSumExp"]
    return sum(_logsumexp_composed(model, node, opset) for node in found)


def _logsumexp_composed(model: onnx.ModelProto, node: onnx.NodeProto, opset: int) -> bool:
    attrs = {a.name: a for a in node.attribute}
    if "noop_with_empty_axes" in attrs and attrs["noop_with_empty_axes"].i:
        return False
    e = Emitter(model, node.name or node.output[0])
    listed = list(attrs["axes"].ints) if "axes" in attrs else None
    axes = node.input[1] if len(node.input) > 1 and node.input[1] else \
        e.const(np.array(listed, np.int64), "axes") if listed is not None else None

    def reduced(reduce: str, x: str) -> str:
        if axes is None:
            return e.node(reduce, [x], keepdims=1)
        if reduce == "ReduceSum" or opset >= 18:  # the axes as an input
            return e.node(reduce, [x, axes], keepdims=1)
        return e.node(reduce, [x], keepdims=1, axes=listed)

    x = node.input[0]
    peak = reduced("ReduceMax", x)
    total = reduced("ReduceSum", e.node("Exp", [e.node("Sub", [x, peak])]))
    if attrs["keepdims"].i if "keepdims" in attrs else 1:
        e.node("Add", [e.node("Log", [total]), peak], node.output[0])
    else:
        kept = e.node("Add", [e.node("Log", [total]), peak])
        e.node("Squeeze", [kept, axes], node.output[0]) if axes is not None else \
            e.node("Reshape", [kept, e.const(np.array([], np.int64), "scalar")], node.output[0])
    replace(model, node, e.nodes)
    return True


FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)


def outer_products_as_matmuls(model: onnx.ModelProto) -> int:
    """Mul(a[..., m, 1], b[..., 1, n]) -> MatMul(a, b), exact (each element one product): HTP
    computed the sum that followed such a Mul wrongly or crashed on it (measured: the delta
    rule's state update in Qwen3.5's decode graph, k[..., :, None] * delta[..., None, :] over
    32 heads of 128 x 128, its new state at cosine 0.06 against the CPU's on the same QDQ
    graph; as a MatMul 0.99999). Both inputs computed and float, their shapes known, m and n
    above 1 (a mask's outer product, DeBERTa's, is integer: HTP has no integer MatMul)."""
    fixed = constants(model)
    found = [n for n in model.graph.node if n.op_type == "Mul"
             and not any(i in fixed for i in n.input)]
    if not found:
        return 0
    types = types_of(model, [i for n in found for i in n.input])
    found = [n for n in found if all(types.get(i) in FLOATS for i in n.input)]
    try:
        shapes = static_shapes(model, [i for n in found for i in n.input])
    except ValueError:  # over protobuf's 2 GB: the shapes the graph says are all there are
        shapes = graph_shapes(model)
    count = 0
    for node in found:
        a, b = (shapes.get(i) for i in node.input)
        if not a or not b or len(a) != len(b) or len(a) < 2 or None in (*a[-2:], *b[-2:]):
            continue
        if a[-1] == 1 and b[-2] == 1 and a[-2] > 1 and b[-1] > 1:
            ordered = list(node.input)
        elif b[-1] == 1 and a[-2] == 1 and b[-2] > 1 and a[-1] > 1:
            ordered = [node.input[1], node.input[0]]
        else:
            continue
        replace(model, node, [helper.make_node("MatMul", ordered, list(node.output),
                                               name=f"{node.name or node.output[0]}/as_MatMul")])
        count += 1
    return count


def broadcast_first_muls(model: onnx.ModelProto) -> int:
    """Mul(x, r) over a computed r that broadcasts to x (fewer elements, each dimension 1 or
    x's) becomes Mul(r, x) (exact: the product commutes); Div(x, s) over such an s becomes
    Mul(Div(1, s), x) (within fp32 rounding). HTP computes the 16-bit Mul or Div with the
    broadcast operand second wrongly where a Mul by a constant follows it, silently: an RMSNorm
    without weight (x * (1 / sqrt(mean(x^2) + eps)), or x / sqrt(...); r [1, 4, 128, 1]) then a
    rotary table [1, 1, 128, 32] read cosine 0.03 against the CPU EP on the same QDQ graph
    (T5Gemma 2's encoder: 0.58 at the query's rotation), 1.0 with the reciprocal first; each
    node alone is right either way (onnxruntime-qnn 2.7.0). Outer products are MatMuls by now,
    and a constant operand is constant_first_muls' (htp_rewrites)."""
    fixed = constants(model)
    found = [n for n in model.graph.node if n.op_type in ("Mul", "Div") and len(n.input) == 2
             and not any(i in fixed for i in n.input)]
    if not found:
        return 0
    try:
        shapes = static_shapes(model, [i for n in found for i in n.input])
    except ValueError:  # over protobuf's 2 GB: the shapes the graph says are all there are
        shapes = graph_shapes(model)
    found = [n for n in found if _broadcasts_second(shapes.get(n.input[0]),
                                                     shapes.get(n.input[1]))]
    types = types_of(model, [n.input[1] for n in found if n.op_type == "Div"])
    count = 0
    for node in found:
        if node.op_type == "Mul":
            node.input[0], node.input[1] = node.input[1], node.input[0]
        elif types.get(node.input[1]) in FLOATS:  # an integer 1 / s would truncate
            base = node.name or node.output[0]
            one = np.array(1, helper.tensor_dtype_to_np_dtype(types[node.input[1]]))
            model.graph.initializer.append(numpy_helper.from_array(one, f"{base}/one"))
            replace(model, node, [
                helper.make_node("Div", [f"{base}/one", node.input[1]], [f"{base}/reciprocal"],
                                 name=f"{base}/reciprocal"),
                helper.make_node("Mul", [f"{base}/reciprocal", node.input[0]],
                                 list(node.output), name=f"{base}/as_Mul")])
        else:
            continue
        count += 1
    return count


def _broadcasts_second(x: list[int | None] | None, r: list[int | None] | None) -> bool:
    """Whether r, of more than one element, broadcasts to x's larger shape."""
    if not x or not r or len(x) != len(r) or None in (*x, *r):
        return False
    return 1 < np.prod(r) < np.prod(x) and all(b in (1, a) for a, b in zip(x, r, strict=True))


# a norm HTP lacks or gets wrong -> (the op its elements are made with, applied after the sum)
NORMS = {"ReduceL2": ("Mul", "Sqrt"), "ReduceL1": ("Abs", None),
         "ReduceSumSquare": ("Mul", None)}


def decompose_norms(model: onnx.ModelProto) -> int:
    """ReduceL2(x) -> Sqrt(ReduceSum(x * x)): a 16-bit ReduceL2 feeding F.normalize's Div fails
    HTP finalization with MEM_ALLOC (SwinV2 cosine attention, OWL embeddings). HTP has no
    ReduceL1 (DBRX's router normalizes its experts' weights with a 1-norm) nor ReduceSumSquare:
    ReduceSum(Abs(x)) and ReduceSum(x * x)."""
    count = 0
    for node in [n for n in model.graph.node if n.op_type in NORMS]:
        element, after = NORMS[node.op_type]
        keep = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
        axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
        if (len(node.input) < 2 or not node.input[1]) and axes is None and \
                next((a.i for a in node.attribute if a.name == "noop_with_empty_axes"), 0):
            continue  # no axes, reduces nothing: a ReduceSum would reduce every axis
        base = node.name or node.output[0]
        inputs = [f"{base}/elements"]
        if len(node.input) > 1 and node.input[1]:
            inputs.append(node.input[1])  # opset 18: axes as an input
        elif axes is not None:
            model.graph.initializer.append(
                numpy_helper.from_array(np.array(axes, np.int64), f"{base}/axes"))
            inputs.append(f"{base}/axes")
        x = node.input[0]
        summed = [f"{base}/sum"] if after else list(node.output)
        nodes = [helper.make_node(element, [x, x] if element == "Mul" else [x],
                                  [f"{base}/elements"], name=f"{base}/norm_{element}"),
                 helper.make_node("ReduceSum", inputs, summed, name=f"{base}/norm_ReduceSum",
                                  keepdims=keep)]
        if after:
            nodes.append(helper.make_node(after, summed, list(node.output),
                                          name=f"{base}/norm_{after}"))
        replace(model, node, nodes)
        count += 1
    return count


def constant_subs_as_adds(model: onnx.ModelProto) -> int:
    """Sub(x, c) of a float constant c -> Add(x, -c) (exact: IEEE subtraction is the addition
    of the negation). HTP computed xIELU's expm1, Sub(Exp(Min(x, eps)), 1), as zeros inside
    Apertus's decode graph, silently (cosine 0.00 against the CPU EP on the same QDQ graph; its
    output range [-0.42, 0], the zero point at the top code; the decode graph 0.95): the same
    chain as an Add of -1 was right (0.99997), and so was the Sub with a range about zero; the
    Sub alone, or its chain without the MatMul before it, was right too (onnxruntime-qnn 2.7.0)."""
    fixed = constants(model)
    found = [n for n in model.graph.node if n.op_type == "Sub" and n.input[1] in fixed
             and n.input[0] not in fixed]
    types = types_of(model, [n.input[1] for n in found])
    count = 0
    for node in found:
        if types.get(node.input[1]) not in FLOATS:
            continue
        base = node.name or node.output[0]
        name = f"{base}/negated"
        model.graph.initializer.append(numpy_helper.from_array(-fixed[node.input[1]], name))
        replace(model, node, [helper.make_node("Add", [node.input[0], name], list(node.output),
                                               name=f"{base}/as_Add")])
        count += 1
    if count:
        drop_unread_initializers(model, [n.input[1] for n in found])
    return count
