"""The quantized pieces of a graph stitched into one model (executors/onnx/layerwise.py), as
the whole graph's QDQ quantization makes it: ONNX Runtime's quantizer names what it adds after
the tensor it quantizes, so the pieces' Q/DQ pairs of a tensor that crosses pieces are found by
name, one kept, and its readers rewired; what cannot be made the same raises `Unstitched`."""

from __future__ import annotations

import heapq
from typing import Any

import onnx
from onnx import helper

from executors.onnx.subgraph import used_names


class Unstitched(Exception):
    """The pieces' quantization would not be the whole graph's."""


def stitch_pieces(model: onnx.ModelProto, crossing: set[str], maker: dict[str, int],
                  doubtful: set[str], done: list[onnx.ModelProto]) -> onnx.ModelProto:
    """One model of the quantized pieces `done` of `model`, as the whole graph's quantization
    makes it. `crossing`: the tensors a piece reads that it does not make (graph inputs too);
    `maker`: the piece that makes each; `doubtful`: those whose type shape inference cannot
    tell."""
    outputs = {o.name for o in model.graph.output}
    nodes = [n for m in done for n in m.graph.node]
    by_name: dict[str, list[tuple[int, onnx.NodeProto]]] = {}
    for k, m in enumerate(done):
        for n in m.graph.node:
            by_name.setdefault(n.name, []).append((k, n))
    dropped: set[int] = set()
    inits = [{t.name: t for t in m.graph.initializer} for m in done]
    for x in sorted(crossing):
        if f"{x}_convert_QuantizeLinear" in by_name:
            raise Unstitched(f"{x!r} changes quantized type where it crosses pieces")
        pairs = dict(by_name.get(f"{x}_QuantizeLinear", []))
        if not pairs:
            continue
        if x in doubtful:
            raise Unstitched(f"{x!r} crosses pieces with a type shape inference cannot tell")
        dqs = dict(by_name.get(f"{x}_DequantizeLinear", []))
        kept = maker[x] if maker.get(x) in pairs else min(pairs)
        dropped |= {id(n) for k, n in [*pairs.items(), *dqs.items()] if k != kept}
        q, dq = pairs[kept], dqs[kept]
        _same_parameters(x, kept, pairs, inits)
        _followed(x, q, done[kept + 1:], by_name)
        q_in = f"{x}_QuantizeLinear_Input" if x in outputs else x
        dq_out = x if x in outputs else f"{x}_DequantizeLinear_Output"
        names = {x, f"{x}_QuantizeLinear_Input", f"{x}_DequantizeLinear_Output"}
        q.input[0], dq.output[0] = q_in, dq_out
        for n in nodes:
            if id(n) in dropped or n is q:
                continue
            _rename(n.input, names, dq_out)
            if n is not dq:
                _rename(n.output, names, q_in)
    kept = _once([n for n in nodes if id(n) not in dropped])
    _dequantized_everywhere({i.name for i in model.graph.initializer}, kept)
    return _assemble(model, done, _ordered(kept))


def _same_parameters(x: str, kept: int, pairs: dict[int, onnx.NodeProto],
                     inits: list[dict[str, onnx.TensorProto]]) -> None:
    """Raise Unstitched where a piece quantized the crossing `x` at another scale or zero point
    than the kept pair's: what that piece computed from them (a reader's int32 bias) would not
    be the whole graph's. (A tensor an op makes at its input's scale, such as a Reshape's
    output, is quantized by its maker at that input's parameters, and by a reader at its own.)"""
    def same(k: int, name: str, other: str) -> bool:
        a, b = inits[kept].get(name), inits[k].get(other)
        return _same(a, b) if a is not None and b is not None else name == other

    want = pairs[kept].input
    for k, q in pairs.items():
        if len(q.input) != len(want) or \
                not all(same(k, a, b) for a, b in zip(want[1:], q.input[1:], strict=True)):
            raise Unstitched(f"{x!r} is quantized at other parameters where it crosses pieces")


def _dequantized_everywhere(weights: set[str], nodes: list[onnx.NodeProto]) -> None:
    """A weight one piece quantized is read dequantized by every node, as the whole graph's
    quantizer rewires every reader of a weight it quantizes (a piece whose readers of it are
    all float would read the float weight)."""
    done = {}
    for n in nodes:
        weight = n.name.removesuffix("_DequantizeLinear")
        if n.op_type == "DequantizeLinear" and weight != n.name and weight in weights \
                and n.output[0] == f"{weight}_DequantizeLinear_Output":
            done[weight] = n.output[0]
    for n in nodes:
        if n.name.removesuffix("_QuantizeLinear") in done:
            continue  # a weight's own Q reads it as it is
        for i, x in enumerate(n.input):
            n.input[i] = done.get(x, x)


# ops ONNX Runtime quantizes only when their input already is, at their input's scale
FOLLOWERS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice",
                       "AveragePool", "TopK", "Gather", "GatherElements", "Split", "Where",
                       "Relu", "Clip", "MaxPool", "Resize", "Pad"})


def _followed(x: str, q: onnx.NodeProto, later: list[onnx.ModelProto],
              by_name: dict[str, list[tuple[int, onnx.NodeProto]]]) -> None:
    """Raise Unstitched where a later piece read the quantized `x` with an op that follows its
    input's quantization (FOLLOWERS) and quantized it otherwise than the whole graph would: the
    whole graph's quantizer knows `x` is quantized when it reaches that op, and gives its output
    `x`'s scale; a piece that was not told (quantizer._marked) would not know."""
    read = {x, f"{x}_DequantizeLinear_Output"}
    for m in later:
        for n in m.graph.node:
            if n.op_type not in FOLLOWERS or not read & set(n.input):
                continue
            found = [node for _, node in by_name.get(f"{n.output[0]}_QuantizeLinear", [])]
            if not found or found[0].input[1] != q.input[1]:
                raise Unstitched(f"{n.op_type} {n.name!r} reads {x!r} in a later piece and is "
                                 "quantized otherwise than in the whole graph")


def _once(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`nodes` with each node two pieces both made (the DequantizeLinear of a weight both
    read) kept once."""
    made: dict[tuple[str, ...], bytes] = {}
    out = []
    for n in nodes:
        outputs = tuple(n.output)
        wire = n.SerializeToString(deterministic=True)
        if outputs in made:
            if made[outputs] != wire:
                raise Unstitched(f"two pieces make {outputs[0]!r} differently")
            continue
        made[outputs] = wire
        out.append(n)
    return out


def _rename(names: Any, old: set[str], new: str) -> None:
    for i, name in enumerate(names):
        if name in old:
            names[i] = new


def _assemble(model: onnx.ModelProto, done: list[onnx.ModelProto],
              nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    used = {x for n in nodes for x in used_names(n)}
    made = {o for n in nodes for o in n.output}
    inits: dict[str, onnx.TensorProto] = {}
    for m in done:
        for t in m.graph.initializer:
            if t.name not in used:
                continue
            if t.name in inits:
                if not _same(inits[t.name], t):
                    raise Unstitched(f"two pieces quantize {t.name!r} differently")
                continue
            inits[t.name] = t
    infos = {v.name: v for m in done for v in m.graph.value_info if v.name in made}
    first = done[0]
    graph = helper.make_graph(nodes, first.graph.name, list(model.graph.input),
                              list(model.graph.output), list(inits.values()),
                              value_info=list(infos.values()))
    domains = {o.domain: o for m in done for o in m.opset_import}
    out = helper.make_model(graph, opset_imports=list(domains.values()),
                            ir_version=first.ir_version, functions=list(first.functions))
    out.producer_name, out.producer_version = first.producer_name, first.producer_version
    out.metadata_props.extend(first.metadata_props)
    return out


def _same(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    """Do two tensors hold the same values, whatever their names? A saved weight's location
    names its digest."""
    if a.data_type != b.data_type or list(a.dims) != list(b.dims):
        return False
    if a.external_data or b.external_data:
        return [(e.key, e.value) for e in a.external_data] == \
            [(e.key, e.value) for e in b.external_data]
    return _unnamed(a) == _unnamed(b)


def _unnamed(t: onnx.TensorProto) -> bytes:
    copy = onnx.TensorProto()
    copy.CopyFrom(t)
    copy.name = ""
    return copy.SerializeToString(deterministic=True)


def _ordered(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`nodes` in topological order, each as early in the given order as its inputs allow."""
    maker = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waits = [{maker[x] for x in used_names(n) if x in maker and maker[x] != i}
             for i, n in enumerate(nodes)]
    readers: dict[int, list[int]] = {}
    for i, deps in enumerate(waits):
        for d in deps:
            readers.setdefault(d, []).append(i)
    left = [len(d) for d in waits]
    ready = [i for i, n in enumerate(left) if n == 0]
    heapq.heapify(ready)
    out: list[onnx.NodeProto] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for r in readers.get(i, []):
            left[r] -= 1
            if left[r] == 0:
                heapq.heappush(ready, r)
    if len(out) != len(nodes):
        raise Unstitched("the stitched pieces have a cycle")
    return out
