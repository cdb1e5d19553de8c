"""A checkpoint stored in 16 bits (bf16, fp16) exported without an fp32 copy of its weights.

The model is loaded and traced in the dtype it was saved in: the traced graph computes in that
dtype, and its weights are the checkpoint's own tensors, not upcast copies. `widen` then makes
it the fp32 graph an fp32 copy of the model exports: every tensor, input, output, constant and
cast of the narrow type is fp32 (ONNX Runtime's CPU EP has no bf16 `Add` or `Where`, and the
quantizer reads fp32), and the casts that became fp32 to fp32 are gone. Each weight is widened
as it is written (`torch_initializers.store`), one at a time; a 16-bit weight is exact in fp32.
The constants the model makes in its own dtype (a scale, an epsilon) stay rounded to it, as
they are when PyTorch runs the checkpoint as saved (export checks the graph accordingly).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

WIDE = onnx.TensorProto.FLOAT
NARROW = {"bfloat16": onnx.TensorProto.BFLOAT16, "float16": onnx.TensorProto.FLOAT16}
_DTYPE_ATTRIBUTES = ("to", "dtype")  # Cast's, EyeLike's and the Random* operators'


def dtype_of(model: Any) -> int | None:
    """The narrow ONNX type a torch model's floating weights are mostly in (None: fp32)."""
    counts: dict[str, int] = {}
    for tensor in model.parameters():
        if tensor.is_floating_point():
            name = str(tensor.dtype).removeprefix("torch.")
            counts[name] = counts.get(name, 0) + tensor.numel()
    found = max(counts, key=counts.__getitem__, default=None)
    return NARROW.get(found or "")


def cast(args: tuple, narrow: int | None) -> tuple:
    """The example inputs in the narrow dtype (a float input meets the weights as they are)."""
    if narrow is None:
        return args
    import torch

    to = torch.bfloat16 if narrow == onnx.TensorProto.BFLOAT16 else torch.float16
    return tuple(a.to(to) if a.is_floating_point() else a for a in args)


def widen(model: onnx.ModelProto, narrow: int) -> int:
    """Make `model` compute in fp32 where it computed in `narrow` (types, constants, casts,
    in every subgraph too); return how many casts became identities and were removed."""
    for graph in _graphs(model.graph):
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.type.tensor_type.elem_type == narrow:
                value.type.tensor_type.elem_type = WIDE
        for tensor in graph.initializer:
            _widen_tensor(tensor, narrow)
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.INT and attr.name in _DTYPE_ATTRIBUTES \
                        and attr.i == narrow:
                    attr.i = WIDE
                elif attr.type == onnx.AttributeProto.TENSOR:
                    _widen_tensor(attr.t, narrow)
                elif attr.type == onnx.AttributeProto.TENSORS:
                    for t in attr.tensors:
                        _widen_tensor(t, narrow)
    return _drop_identity_casts(model)


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """A graph and every subgraph its nodes hold (Loop, If, Scan bodies), depth first."""
    found = [graph]
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else \
                list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else []
            for sub in subs:
                found.extend(_graphs(sub))
    return found


def _widen_tensor(tensor: onnx.TensorProto, narrow: int) -> None:
    """A narrow tensor held in the graph (a constant) made fp32 in place; one whose data is a
    blob outside the graph is the writer's to widen (torch_initializers.store)."""
    if tensor.data_type != narrow:
        return
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise ValueError(f"{tensor.name}: a {onnx.TensorProto.DataType.Name(narrow)} tensor "
                         "stored outside the graph cannot be widened here")
    values = wide_array(tensor)
    tensor.ClearField("raw_data")
    tensor.ClearField("int32_data")
    tensor.data_type = WIDE
    tensor.raw_data = values.astype("<f4").tobytes()


def wide_array(tensor: onnx.TensorProto) -> np.ndarray:
    """The values of a bf16 or fp16 tensor held in the graph, as fp32."""
    if tensor.raw_data:
        bits = np.frombuffer(tensor.raw_data, dtype="<u2")
    else:  # 16-bit values kept one per int32_data entry
        bits = np.asarray(tensor.int32_data, dtype=np.uint32).astype(np.uint16)
    if tensor.data_type == onnx.TensorProto.BFLOAT16:
        values = (bits.astype(np.uint32) << 16).view(np.float32)
    else:
        values = bits.view(np.float16).astype(np.float32)
    return values.reshape(tuple(tensor.dims))


def _drop_identity_casts(model: onnx.ModelProto) -> int:
    """Remove each Cast to fp32 of a tensor already fp32 (what `.float()` and
    `.to(input_dtype)` of a narrow model become once widened), its readers reading its input;
    a Cast that gives a graph output stays."""
    typed = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    kinds = {v.name: v.type.tensor_type.elem_type
             for v in [*typed.graph.input, *typed.graph.value_info, *typed.graph.output]}
    kinds.update({t.name: t.data_type for t in model.graph.initializer})
    graph = model.graph
    kept_names = {o.name for o in graph.output}
    renamed: dict[str, str] = {}
    keep = []
    for node in graph.node:
        source = renamed.get(node.input[0], node.input[0]) if node.input else ""
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if node.op_type == "Cast" and to == WIDE and kinds.get(source) == WIDE \
                and node.output[0] not in kept_names:
            renamed[node.output[0]] = source
            continue
        keep.append(node)
    if not renamed:
        return 0
    for sub in _graphs(graph):
        for node in sub.node:
            for i, name in enumerate(node.input):
                if name in renamed:
                    node.input[i] = renamed[name]
    del graph.node[:]
    graph.node.extend(keep)
    return len(renamed)
