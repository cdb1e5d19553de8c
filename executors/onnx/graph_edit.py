"""Small reads and edits of an ONNX graph that the target rewrites share: its constants, the
element types and static shapes the graph declares, replacing a node by several, dropping
what nothing reads, and naming new tensors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper


class Constants(Mapping[str, np.ndarray]):
    """Every constant tensor by name (initializers and Constant node outputs), as it was when
    the mapping was made; each is made an array when first read, so a rewrite that looks up a
    few names never holds a copy of every weight, and a scan over all holds one at a time."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self._tensors = {i.name: i for i in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type == "Constant" and node.attribute and \
                    node.attribute[0].name == "value":
                self._tensors[node.output[0]] = node.attribute[0].t
        self._read: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._read:
            self._read[name] = numpy_helper.to_array(self._tensors[name])
        return self._read[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def items(self) -> Iterator[tuple[str, np.ndarray]]:  # type: ignore[override]
        """Each constant in turn, not kept: a scan holds one array at a time."""
        for name, tensor in self._tensors.items():
            yield name, self._read[name] if name in self._read else numpy_helper.to_array(tensor)


def constants(model: onnx.ModelProto) -> Constants:
    """Every constant tensor by name: initializers and Constant node outputs (read lazily)."""
    return Constants(model)


def replace(model: onnx.ModelProto, old: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
    """Put `new` where `old` stands in the node list (which stays topologically sorted)."""
    nodes = list(model.graph.node)
    i = nodes.index(old)
    nodes[i:i + 1] = new
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def readers(model: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    """Each tensor name -> the nodes that read it, in graph order."""
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def drop_unread_initializers(model: onnx.ModelProto, names: list[str]) -> None:
    """Remove those of `names` that are initializers no node or graph output reads any more
    (a weight a rewrite replaced by its reshaped copy)."""
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    for init in [i for i in model.graph.initializer if i.name in names and i.name not in read]:
        model.graph.initializer.remove(init)


def elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every named tensor the graph says (value_info from shape inference)."""
    types = {v.name: v.type.tensor_type.elem_type for v in
             (*model.graph.value_info, *model.graph.input, *model.graph.output)}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            types[n.output[0]] = n.attribute[0].t.data_type
    return types


def attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    """The value of the node's attribute `name`, `default` where it has none."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def types_of(model: onnx.ModelProto, names: list[str]) -> dict[str, int]:
    """The element type of every tensor the graph says, inferred where one of `names` has none
    (an earlier rewrite left it unsaid)."""
    types = elem_types(model)
    if any(name not in types for name in names):
        try:
            types = elem_types(onnx.shape_inference.infer_shapes(model))
        except ValueError:  # over protobuf's 2 GB: the types the graph says are all there are
            pass
    return types


def shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """The shape of every named tensor the graph declares (None: a dimension it does not fix)."""
    out = {v.name: [d.dim_value if d.HasField("dim_value") else None
                    for d in v.type.tensor_type.shape.dim]
           for v in (*model.graph.value_info, *model.graph.input, *model.graph.output)
           if v.type.tensor_type.HasField("shape")}
    out.update({i.name: list(i.dims) for i in model.graph.initializer})
    return out


def static_shapes(model: onnx.ModelProto, names: list[str]) -> dict[str, list[int | None]]:
    """shapes(model), with ONNX shape inference run first when one of `names` has none (a
    rewrite earlier in the same legalization wrote tensors without value_info)."""
    found = shapes(model)
    if all(n in found for n in names):
        return found
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    return shapes(model)


def with_constant_second(model: onnx.ModelProto, op_type: str) -> tuple[
        Constants, list[onnx.NodeProto], dict[str, list[int | None]]]:
    """The graph's constants, its `op_type` nodes whose second input is one of them (a
    lowering's candidates: CumSum's axis, GatherND's indices), and the shapes the graph
    declares for their first inputs (inferred where an earlier rewrite left them unsaid)."""
    consts = constants(model)
    found = [n for n in model.graph.node if n.op_type == op_type and n.input[1] in consts]
    known = static_shapes(model, [n.input[0] for n in found]) if found else {}
    return consts, found, known


def drop_dead(model: onnx.ModelProto) -> None:
    """Remove nodes whose outputs nothing reads (and that are not graph outputs): walked back
    from the outputs once, a name an If's or Loop's branch reads counted as read by its node."""
    nodes = list(model.graph.node)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output}
    live: set[int] = set()
    todo = [o.name for o in model.graph.output]
    while todo:
        k = producer.get(todo.pop())
        if k is None or k in live:
            continue
        live.add(k)
        todo += [i for i in _reads(nodes[k]) if i]
    if len(live) < len(nodes):
        kept = [n for k, n in enumerate(nodes) if k in live]
        del model.graph.node[:]
        model.graph.node.extend(kept)


def _reads(node: onnx.NodeProto) -> list[str]:
    """The names a node reads: its inputs, and what the nodes of its branches read."""
    names = list(node.input)
    for attribute in node.attribute:
        for graph in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else
                      list(attribute.graphs)):
            names += [i for inner in graph.node for i in _reads(inner)]
    return names


def opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


class Emitter:
    """Nodes and constants for one replaced node, named under `base` (`{base}/{what}_{i}`)."""

    def __init__(self, model: onnx.ModelProto, base: str) -> None:
        self.model, self.base = model, base
        self.nodes: list[onnx.NodeProto] = []
        self._n = 0
        self._inits = {i.name: i for i in model.graph.initializer}

    def constant(self, name: str) -> np.ndarray | None:
        """The value of `name` if it is an initializer (a weight reshaped or transposed stays
        a weight, which the quantizer then quantizes as one)."""
        init = self._inits.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def fresh(self, what: str) -> str:
        self._n += 1
        return f"{self.base}/{what}_{self._n}"

    def const(self, value: np.ndarray, what: str) -> str:
        name = self.fresh(what)
        self.model.graph.initializer.append(numpy_helper.from_array(value, name))
        self._inits[name] = self.model.graph.initializer[-1]
        return name

    def node(self, op: str, inputs: list[str], output: str | None = None, **attrs) -> str:
        out = output or self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{out}/{op}", **attrs))
        return out

    def reshape(self, x: str, shape: list[int], output: str | None = None) -> str:
        value = self.constant(x)
        if value is not None and output is None:
            return self.const(value.reshape(shape), "weight")
        return self.node("Reshape", [x, self.const(np.array(shape, np.int64), "shape")], output)

    def transpose(self, x: str, perm: list[int], output: str | None = None) -> str:
        if perm == sorted(perm) and output is None:
            return x
        value = self.constant(x)
        if value is not None and output is None:
            return self.const(np.ascontiguousarray(value.transpose(perm)), "weight")
        return self.node("Transpose", [x], output, perm=perm)

    def reduce_sum(self, x: str, axes: list[int], keepdims: int = 0) -> str:
        return self.reduce("ReduceSum", x, axes, keepdims) if axes else x

    def reduce(self, op_type: str, x: str, axes: list[int], keepdims: int,
               output: str | None = None) -> str:
        """A Reduce* node, its axes an input from the opset that made them one (13 for
        ReduceSum, 18 for the others), an attribute before."""
        if opset(self.model) >= (13 if op_type == "ReduceSum" else 18):
            return self.node(op_type, [x, self.const(np.array(axes, np.int64), "axes")],
                             output, keepdims=keepdims)
        return self.node(op_type, [x], output, axes=axes, keepdims=keepdims)
