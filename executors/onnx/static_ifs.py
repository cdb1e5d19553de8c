"""`If` nodes whose condition the graph's constants decide, replaced by the branch they take.

TorchScript writes `squeeze(d)` on an axis whose size the trace did not know as an `If` on that
size: a `Squeeze` in one branch, an `Identity` in the other. Where the size comes from the
graph's constants after all (LongCat-Flash's experts over a routing of k picks), onnx.checker's
shape inference follows the branch that never runs and fails on it (a Squeeze of a dimension of
2), and HTP has no `If`. The condition is computed from the constants it depends on (ONNX's
reference evaluator, on those nodes alone; a `Shape` of a tensor whose shape ONNX's shape
inference fixes from the graph's inputs, not from the exporter's notes, is a constant too), and
the node is replaced by its branch's nodes."""

from __future__ import annotations

from typing import Any

import onnx
from onnx import helper

from executors.onnx.graph_edit import constants, drop_dead

ROUNDS = 4  # of folding: each takes one shape inference of the whole graph
MAX_CHAIN = 256  # nodes a condition may depend on (a shape computation, not a model)
UNFOLDED = frozenset({"If", "Loop", "Scan", "RandomNormal", "RandomUniform",
                      "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})


def fold_static_ifs(model: onnx.ModelProto) -> int:
    """Replace each `If` of a constant condition by its taken branch; how many were."""
    count = 0
    for _ in range(ROUNDS):  # a taken branch may hold another If, decided the next round
        ifs = [n for n in model.graph.node if n.op_type == "If"]
        if not ifs:
            break
        producer = {o: n for n in model.graph.node for o in n.output}
        inits = {i.name: i for i in model.graph.initializer}
        inits.update(_fixed_shapes(model))
        taken = {}
        for node in ifs:
            chain = _constant_chain(node.input[0], producer, inits, set())
            decided = None if chain is None else _evaluate(model, node.input[0], chain, inits)
            if decided is not None:
                taken[node.output[0]] = next(a.g for a in node.attribute if a.name == (
                    "then_branch" if decided else "else_branch"))
        if taken:  # one rebuild of the node list, each If in its place
            nodes = []
            for node in model.graph.node:
                branch = taken.get(node.output[0]) if node.op_type == "If" else None
                nodes += [node] if branch is None else _inlined(model, node, branch)
            del model.graph.node[:]
            model.graph.node.extend(nodes)
        count += len(taken)
        if not taken:
            break
    if count:
        drop_dead(model)
    return count


def _fixed_shapes(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """The outputs of `Shape` nodes whose input's shape is fixed, and of `Gather`s of constant
    indices from a `Shape` that pick fixed sizes, as constants: inferred from the graph's inputs
    and constants alone (the exporter's value_info, which may note a traced size of a free axis,
    is left out)."""
    import numpy as np
    from onnx import numpy_helper

    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, data_prop=True)
    except Exception:  # noqa: BLE001 - a graph inference cannot follow: no shape is fixed
        return {}
    dims = {v.name: [d.dim_value if d.HasField("dim_value") else None
                     for d in v.type.tensor_type.shape.dim]
            for v in (*inferred.graph.value_info, *inferred.graph.input)
            if v.type.tensor_type.HasField("shape")}
    sizes = {}  # a Shape node's output: the sizes it gives (None: free)
    for node in (n for n in model.graph.node if n.op_type == "Shape"):
        shape = dims.get(node.input[0])
        if shape is not None:
            begin = next((a.i for a in node.attribute if a.name == "start"), 0)
            end = next((a.i for a in node.attribute if a.name == "end"), len(shape))
            sizes[node.output[0]] = shape[begin:end]
    out = {name: numpy_helper.from_array(np.array(got, np.int64), name)
           for name, got in sizes.items() if None not in got}
    consts = constants(model)
    for node in (n for n in model.graph.node if n.op_type == "Gather"):
        got = sizes.get(node.input[0])
        if got is None or node.input[1] not in consts or node.output[0] in out:
            continue
        picked = np.array(got, dtype=object)[consts[node.input[1]]]
        if None not in np.asarray(picked).reshape(-1).tolist():
            out[node.output[0]] = numpy_helper.from_array(
                np.asarray(picked).astype(np.int64), node.output[0])
    return out


def _constant_chain(name: str, producer: dict[str, onnx.NodeProto],
                    inits: dict[str, onnx.TensorProto],
                    seen: set[str]) -> list[onnx.NodeProto] | None:
    """The nodes `name` is computed from, in order, where they read constants alone (stored in
    the file, not in external data); None where it reads a graph input or is too long."""
    if name in inits:
        external = inits[name].data_location == onnx.TensorProto.EXTERNAL
        return None if external else []
    node = producer.get(name)
    if node is None or node.op_type in UNFOLDED:
        return None  # a graph input, or an op whose value is not a constant's
    if node.output[0] in seen:
        return []
    seen.add(node.output[0])
    chain: list[onnx.NodeProto] = []
    for source in (i for i in node.input if i):
        part = _constant_chain(source, producer, inits, seen)
        if part is None:
            return None
        chain += part
    chain.append(node)
    return chain if len(chain) <= MAX_CHAIN else None


def _evaluate(model: onnx.ModelProto, name: str, chain: list[onnx.NodeProto],
              inits: dict[str, onnx.TensorProto]) -> bool | None:
    """The condition's value, computed from its chain; None where it cannot be."""
    from onnx.reference import ReferenceEvaluator

    read = {i for n in chain for i in n.input}
    graph = helper.make_graph(list(chain), "condition", [], [helper.make_value_info(
        name, onnx.TypeProto())], [inits[i] for i in read if i in inits])
    small = helper.make_model(graph, opset_imports=list(model.opset_import),
                              ir_version=model.ir_version)
    try:
        value: Any = ReferenceEvaluator(small).run(None, {})[0]
    except Exception:  # noqa: BLE001 - an op the reference evaluator lacks: leave it be
        return None
    return bool(value.reshape(-1)[0]) if getattr(value, "size", 0) == 1 else None


def _inlined(model: onnx.ModelProto, node: onnx.NodeProto,
             branch: onnx.GraphProto) -> list[onnx.NodeProto]:
    """What replaces `node`: `branch`'s nodes (named under the If's name), giving the If's
    outputs; the branch's initializers moved to the graph."""
    scope = node.name or node.output[0]
    made = {o for n in branch.node for o in n.output}
    renamed = {out.name: outer for out, outer in zip(branch.output, node.output, strict=True)
               if out.name in made}
    nodes = []
    for inner in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{scope}/{inner.name or inner.output[0]}"
        copy.input[:] = [renamed.get(i, i) for i in inner.input]
        copy.output[:] = [renamed.get(o, o) for o in inner.output]
        nodes.append(copy)
    for out, outer in zip(branch.output, node.output, strict=True):
        if out.name not in made:  # the branch hands on an outer value as it is
            nodes.append(helper.make_node("Identity", [out.name], [outer],
                                          name=f"{scope}/{outer}_taken"))
    model.graph.initializer.extend(branch.initializer)
    return nodes
