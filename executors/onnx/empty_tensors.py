"""Zero-sized tensors, which QNN HTP has no place for: a Concat input with a zero-length axis
contributes nothing, so it is dropped from the Concat (exact), and the nodes that made only it
go with it. A partial rotary embedding exports this way when the rotary width is the whole
head (Phi-3: `cat((q_rot, q[..., rotary_dim:]))`, whose pass-through slice is empty); HTP
declined the empty Slice and its QuantizeLinear ("Model input or output name not exist")."""

from __future__ import annotations

import onnx

from executors.onnx.graph_edit import drop_dead, static_shapes


def _concat_inputs(model: onnx.ModelProto) -> list[str]:
    return [i for n in model.graph.node if n.op_type == "Concat" for i in n.input]


def empty_concat_inputs(model: onnx.ModelProto) -> list[str]:
    """The Concat inputs whose static shape holds a zero."""
    names = _concat_inputs(model)
    dims = static_shapes(model, names) if names else {}
    return [n for n in names if 0 in (dims.get(n) or [])]


def drop_empty_concat_inputs(model: onnx.ModelProto) -> int:
    """Drop every empty Concat input (a Concat left with one input becomes an Identity); how
    many were dropped."""
    empty = set(empty_concat_inputs(model))
    if not empty:
        return 0
    count = 0
    for node in model.graph.node:
        if node.op_type != "Concat" or not empty & set(node.input):
            continue
        kept = [i for i in node.input if i not in empty]
        count += len(node.input) - len(kept)
        if not kept:  # all empty: the output is empty too, and stays for what reads it
            continue
        del node.input[:]
        node.input.extend(kept)
        if len(kept) == 1:
            node.op_type = "Identity"
            del node.attribute[:]
    drop_dead(model)
    return count
