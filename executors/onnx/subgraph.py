"""Cut the subgraph of one module out of a tagged ONNX graph.

A module is its hierarchy tag and every tag below it. Its piece holds the nodes carrying those
tags, plus the constant producers they read (Constant nodes, nodes of initializers only, and
the Q/DQ chain in front of an input), so weights stay weights and a quantized piece receives
float tensors it quantizes itself, as the whole graph does. Tensors the piece reads but does
not make are its inputs; tensors its module nodes make that the rest of the graph (or the
graph's outputs) read are its outputs. Their types and shapes come from shape inference on the
whole graph; where it cannot tell (ops outside the ONNX domain, such as ONNX Runtime's 16-bit
Q/DQ), the caller supplies them from the tensor's value on a sample input.

A graph is cut into consecutive parts by its repeated block (`blocks`, `assign`): a language
model's decoder layers, found in the tags or, where a graph lost them, its node names.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import onnx
from onnx import helper

from executors.onnx.artifacts import FACTS_KEY, TAG_KEY

PULLED = frozenset({"QuantizeLinear", "DequantizeLinear", "Constant"})
DROPPED_META = (FACTS_KEY, "winml.io.inputs", "winml.io.outputs")
PIECE_KEY = "modelplan.module"


@dataclass
class Cut:
    """Which nodes of the whole graph a module's piece keeps, and its boundary."""

    tag: str
    keep: list[int]              # node indices, in graph order
    inputs: list[str]
    outputs: list[str]
    module_nodes: int            # nodes carrying the module's tags (the rest are pulled in)


def node_tags(graph: onnx.GraphProto) -> list[str | None]:
    """Each node's hierarchy tag (None when it has none), in node order."""
    return [next((p.value for p in n.metadata_props if p.key == TAG_KEY), None)
            for n in graph.node]


def class_of(path: str) -> str:
    """The class name of a module path's last segment ("BertLayer.0" -> "BertLayer")."""
    return path.rsplit("/", 1)[-1].partition(".")[0]


def under(tag: str | None, path: str) -> bool:
    return tag is not None and (tag == path or tag.startswith(path + "/"))


def matches(spec: str, paths: Iterable[str]) -> list[str]:
    """The module paths `spec` names: the tag path itself, or every module whose class is
    `spec` (only the outermost when one such module holds another)."""
    known = sorted(set(paths))
    if spec.startswith("/"):
        return [spec] if spec in known else []
    hits = [p for p in known if class_of(p) == spec]
    return [p for p in hits if not any(p != q and under(p, q) for q in hits)]


def members(tags: list[str | None], path: str) -> list[int]:
    return [i for i, t in enumerate(tags) if under(t, path)]


def used_names(node: onnx.NodeProto) -> list[str]:
    """The tensors a node reads: its inputs and what its subgraphs read from outside."""
    names = [x for x in node.input if x]
    for attr in node.attribute:
        for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            names += _outer_names(g)
    return names


def _outer_names(graph: onnx.GraphProto) -> list[str]:
    inner = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    inner |= {o for n in graph.node for o in n.output}
    return [x for n in graph.node for x in used_names(n) if x not in inner]


def value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Type and shape of every tensor shape inference can tell, by name."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return {v.name: v for v in [*g.value_info, *g.input, *g.output]}


def cut(graph: onnx.GraphProto, path: str, chosen: list[int]) -> Cut:
    """The piece of `graph` made of the nodes `chosen` (the module's nodes)."""
    nodes = list(graph.node)
    inits = {i.name for i in graph.initializer}
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    keep = _with_constant_producers(nodes, set(chosen), producer, inits)
    made = {o for i in keep for o in nodes[i].output if o}
    read_outside = {x for i, n in enumerate(nodes) if i not in keep for x in used_names(n)}
    read_outside |= {o.name for o in graph.output}
    inputs: list[str] = []
    for i in sorted(keep):
        for x in used_names(nodes[i]):
            if x not in made and x not in inits and x not in inputs:
                inputs.append(x)
    fixed = constant_tensors(graph)  # a constant another module reads is not an output
    outputs = [o for i in sorted(chosen) for o in nodes[i].output
               if o and o in read_outside and o not in fixed]
    return Cut(path, sorted(keep), inputs, outputs, len(chosen))


def build(model: onnx.ModelProto, c: Cut,
          infos: dict[str, onnx.ValueInfoProto]) -> onnx.ModelProto:
    """The piece as a model of its own: the same opsets, functions and model metadata (but the
    export's I/O specs and the facts stamp), and `modelplan.module` naming the module."""
    graph = model.graph
    nodes = [graph.node[i] for i in c.keep]
    inits = {i.name: i for i in graph.initializer}
    used = {x for n in nodes for x in used_names(n)}
    body = helper.make_graph(
        nodes, c.tag, [_info(x, infos) for x in c.inputs], [_info(x, infos) for x in c.outputs],
        [inits[x] for x in sorted(used & set(inits))])
    _rename_generated(body)
    piece = helper.make_model(body, opset_imports=list(model.opset_import),
                              ir_version=model.ir_version, functions=list(model.functions))
    for p in model.metadata_props:
        if p.key not in DROPPED_META:
            piece.metadata_props.add(key=p.key, value=p.value)
    piece.metadata_props.add(key=PIECE_KEY, value=c.tag)
    return piece


GENERATED = re.compile(r"_token_\d+$")


def _rename_generated(graph: onnx.GraphProto) -> None:
    """Rename initializers named the way ONNX Runtime names what its optimizers create
    (`<name>_token_<n>`): ORT 1.32 can generate the same name again in a piece and then fails
    ("Attempt to replace the existing tensor")."""
    renamed = {i.name: f"{i.name}_kept" for i in graph.initializer if GENERATED.search(i.name)}
    for init in graph.initializer:
        init.name = renamed.get(init.name, init.name)
    for node in graph.node:
        for k, x in enumerate(node.input):
            if x in renamed:
                node.input[k] = renamed[x]


def constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors computed from initializers alone (nodes in graph order are topological)."""
    fixed = {i.name for i in graph.initializer}
    for n in graph.node:
        if all(x in fixed for x in used_names(n)):
            fixed.update(o for o in n.output if o)
    return fixed


def _with_constant_producers(nodes: list[onnx.NodeProto], keep: set[int],
                             producer: dict[str, int], inits: set[str]) -> set[int]:
    """`keep` and, transitively, the producers of its inputs that are constant or Q/DQ."""
    keep = set(keep)
    frontier = list(keep)
    while frontier:
        for x in used_names(nodes[frontier.pop()]):
            p = producer.get(x)
            if p is None or p in keep:
                continue
            n = nodes[p]
            if n.op_type in PULLED or all(y in inits for y in used_names(n)):
                keep.add(p)
                frontier.append(p)
    return keep


def known(info: onnx.ValueInfoProto | None) -> bool:
    """Does `info` give a tensor's element type and every dimension?"""
    if info is None or not info.type.HasField("tensor_type"):
        return False
    t = info.type.tensor_type
    return bool(t.elem_type) and t.HasField("shape") and \
        all(d.HasField("dim_value") for d in t.shape.dim)


def _info(name: str, infos: dict[str, onnx.ValueInfoProto]) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(infos[name])
    return out


BLOCK = re.compile(r"^(.*?/[A-Za-z_]\w*)\.(\d+)(?:/|$)")


def blocks(tags: list[str | None]) -> tuple[str, list[int | None]]:
    """The repeated block's path (the numbered module with the most instances) and each
    node's block index (None outside every block)."""
    numbered = [BLOCK.match(t) if t else None for t in tags]
    instances: Counter[str] = Counter(prefix for prefix, _ in
                                      {(m.group(1), m.group(2)) for m in numbered if m})
    if not instances:
        return "", [None] * len(tags)
    prefix = max(instances, key=lambda p: (instances[p], -len(p)))
    return prefix, [int(m.group(2)) if m and m.group(1) == prefix else None for m in numbered]


def assign(graph: onnx.GraphProto, index: list[int | None], parts: int) -> list[int]:
    """Each node's part: blocks spread evenly over the parts; a node outside every block goes
    with the latest part among the nodes it reads (nodes are in topological order), so what
    precedes the first block (embeddings, masks, positions) is the first part's and what
    follows the last (the final norm, the head) the last part's."""
    count = max((i for i in index if i is not None), default=-1) + 1
    if count < parts:
        raise ValueError(f"the graph has {count} repeated block(s), fewer than {parts} parts")
    part_of: dict[str, int] = {}
    out: list[int] = []
    constant = constant_tensors(graph)
    for node, i in zip(graph.node, index, strict=True):
        if i is not None:
            part = i * parts // count
        else:
            part = max((part_of[x] for x in used_names(node) if x in part_of),
                       default=0)
        out.append(part)
        for made in node.output:
            part_of[made] = part
    # a node outside the blocks that reads only constants (a weight's DequantizeLinear) goes
    # with its first reader: its part would otherwise hold a dead copy of the weight
    readers: dict[str, int] = {}
    for n, node in enumerate(graph.node):
        for x in used_names(node):
            readers.setdefault(x, out[n])
    for n, (node, i) in enumerate(zip(graph.node, index, strict=True)):
        if i is None and all(x in constant for x in used_names(node)):
            out[n] = min((readers[o] for o in node.output if o in readers), default=out[n])
    _no_later_reads(graph, out)
    return out


def _no_later_reads(graph: onnx.GraphProto, out: list[int]) -> None:
    """A node an earlier part reads goes with that part, and so does what it reads in turn: the
    exporter may make one value two layers share under the later layer's name (a rotary
    table's Unsqueeze), and a part cannot read what a later part makes."""
    read_by: dict[str, list[int]] = {}
    for n, node in enumerate(graph.node):
        for x in used_names(node):
            read_by.setdefault(x, []).append(n)
    for n in range(len(graph.node) - 1, -1, -1):  # readers first: nodes are topologically sorted
        out[n] = min([out[n], *(out[r] for o in graph.node[n].output for r in read_by.get(o, []))])
