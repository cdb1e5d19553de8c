"""Quantization layer by layer. A graph with a repeated block (a language model's decoder
layers) is calibrated and quantized in consecutive pieces of a few blocks each (`cut`), so that
the calibrator and the quantizer hold one piece's weights at a time, not the whole model's.

Calibration runs the pieces in order, as sequential quantizers do (`calibrate`): a piece's
calibration inputs are the fp32 values the earlier pieces gave on the same samples (the piece's
own graph run by ONNX Runtime with its optimizations off, as its calibrator runs it), and its
activation ranges are collected by ONNX Runtime's calibrator on that piece. The ranges of all
pieces make one calibration cache: the ranges the whole graph's calibration gives.

Each piece is then quantized by ONNX Runtime's quantizer under the whole graph's QDQ
configuration, and the quantized pieces are stitched (`stitch`). Where a tensor crosses from
one piece to another, each of them may have given it a Q/DQ pair of its own (the maker at its
graph output, a reader at its graph input): one is kept and named as the whole graph's
quantizer names it, and every reader reads its DequantizeLinear. What a stitch cannot make the
same as the whole graph's quantization (a crossing tensor whose type shape inference cannot
tell, a type conversion at a crossing, one weight quantized two ways) raises `Unstitched`,
and the caller quantizes the whole graph.
"""

from __future__ import annotations

import heapq
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from executors.onnx.subgraph import assign, blocks, used_names, value_infos
from planner.core.memory import LAYERWISE_FROM

PIECE_BYTES = 512 * 2**20  # a piece's fp32 weights, at most (a piece holds one block at least)


class Unstitched(Exception):
    """The pieces' quantization would not be the whole graph's."""


@dataclass
class Piece:
    nodes: list[int]                                   # node indices in the whole graph
    inputs: list[str] = field(default_factory=list)    # tensors it reads but does not make
    outputs: list[str] = field(default_factory=list)   # tensors it makes that others read


@dataclass
class Layers:
    """A graph cut into pieces by its repeated block."""

    block: str
    pieces: list[Piece]
    infos: dict[str, onnx.ValueInfoProto]  # type and shape of each tensor, where known


def weight_bytes(graph: onnx.GraphProto) -> int:
    """The bytes of a graph's initializers, without reading external data."""
    total = 0
    for t in graph.initializer:
        length = next((e.value for e in t.external_data if e.key == "length"), None)
        total += int(length) if length is not None else len(t.raw_data) or \
            int(np.prod(t.dims, dtype=np.int64)) * 4
    return total


def cut(model: onnx.ModelProto, tags: list[str], mode: str) -> Layers | None:
    """The pieces `model` is quantized in under `mode` (None: as a whole). Blocks come from the
    hierarchy tags, else from the node names (a graph an ONNX Runtime pass rewrote has lost
    its tags, not its names). Raises Unstitched for a graph whose pieces could not give the
    whole graph's quantization."""
    graph = model.graph
    total = weight_bytes(graph)
    if mode == "never" or (mode == "auto" and total < LAYERWISE_FROM):
        return None
    names = [t or n.name for t, n in zip(tags, graph.node, strict=True)]
    block, index = blocks(names)
    count = max((i for i in index if i is not None), default=-1) + 1
    if count < 2:
        raise Unstitched("the graph has no repeated block (numbered modules) to cut at")
    parts = min(count, max(2, math.ceil(total / PIECE_BYTES)))
    where = assign(graph, index, parts)
    _no_shared_bias(graph, where)
    return Layers(block, _pieces(graph, where, parts), value_infos(model))


# inputs ONNX Runtime quantizes as int32 biases (scale: input scale x weight scale)
BIASES = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2, "LayerNormalization": 2,
          "InstanceNormalization": 2}


def _no_shared_bias(graph: onnx.GraphProto, where: list[int]) -> None:
    """Raise Unstitched for a bias that nodes of two pieces read: ONNX Runtime gives each
    reader a copy of a shared bias, named by a counter each piece would restart."""
    inits = {i.name for i in graph.initializer}
    readers: dict[str, set[int]] = {}
    for node, k in zip(graph.node, where, strict=True):
        at = BIASES.get(node.op_type)
        if at is not None and len(node.input) > at and node.input[at] in inits:
            readers.setdefault(node.input[at], set()).add(k)
    shared = sorted(name for name, found in readers.items() if len(found) > 1)
    if shared:
        raise Unstitched(f"bias {shared[0]!r} is read in {len(readers[shared[0]])} pieces "
                         "(ONNX Runtime numbers its copies per graph)")


def _pieces(graph: onnx.GraphProto, where: list[int], parts: int) -> list[Piece]:
    made_in: dict[str, int] = {}
    for node, k in zip(graph.node, where, strict=True):
        made_in.update((o, k) for o in node.output if o)
    inits = {i.name for i in graph.initializer}
    pieces = [Piece([]) for _ in range(parts)]
    for n, (node, k) in enumerate(zip(graph.node, where, strict=True)):
        pieces[k].nodes.append(n)
        for x in used_names(node):
            j = made_in.get(x)
            if x in inits or j == k:
                continue
            if j is not None and j > k:
                raise Unstitched(f"piece {k} reads {x!r}, which the later piece {j} makes")
            _add(pieces[k].inputs, x)
            if j is not None:
                _add(pieces[j].outputs, x)
    for out in graph.output:
        if out.name in made_in:
            _add(pieces[made_in[out.name]].outputs, out.name)
    return [p for p in pieces if p.nodes]


def _add(names: list[str], name: str) -> None:
    names.extend([name] if name not in names else [])


def piece_model(model: onnx.ModelProto, layers: Layers, k: int,
                types: dict[str, int] | None = None) -> onnx.ModelProto:
    """Piece k as a model of its own, its weights the whole model's external data (saved
    beside it, it reads them where they are). `types`: element types of crossing tensors that
    shape inference cannot tell, from their values."""
    graph, piece = model.graph, layers.pieces[k]
    nodes = [graph.node[i] for i in piece.nodes]
    used = {x for n in nodes for x in used_names(n)}
    local = used | {o for n in nodes for o in n.output}
    declared = {v.name: v for v in graph.input}
    inputs = [_info(x, declared.get(x) or layers.infos.get(x), (types or {}).get(x))
              for x in piece.inputs]
    outputs = [_info(x, layers.infos.get(x), None) for x in piece.outputs]
    body = helper.make_graph(nodes, graph.name, inputs, outputs,
                             [i for i in graph.initializer if i.name in used],
                             value_info=[v for v in graph.value_info if v.name in local])
    out = helper.make_model(body, opset_imports=list(model.opset_import),
                            ir_version=model.ir_version, functions=list(model.functions))
    out.metadata_props.extend(model.metadata_props)
    return out


def _info(name: str, info: onnx.ValueInfoProto | None, elem: int | None) -> onnx.ValueInfoProto:
    if info is not None and info.type.tensor_type.elem_type:
        found = onnx.ValueInfoProto()
        found.CopyFrom(info)
        return found
    if elem is not None:
        return helper.make_tensor_value_info(name, elem, None)
    return onnx.ValueInfoProto(name=name)


def unsure(layers: Layers) -> set[str]:
    """Crossing tensors whose type the whole graph's shape inference cannot tell."""
    return {x for p in layers.pieces for x in p.inputs
            if x not in layers.infos or not layers.infos[x].type.tensor_type.elem_type}


def calibrate(model: onnx.ModelProto, layers: Layers, where: Path,
              feeds: list[dict[str, np.ndarray]],
              calibrator: Callable[[Path, Path], Any]) -> dict[str, Any]:
    """The activation ranges of every piece, collected in order on `feeds` (the whole graph's
    calibration inputs): `calibrator(model path, augmented model path)` is ONNX Runtime's
    calibrator for one piece. Pieces are saved in `where`, beside the whole model's weights."""
    last = {x: k for k, p in enumerate(layers.pieces) for x in p.inputs}
    values = [dict(f) for f in feeds]
    ranges: dict[str, Any] = {}
    for k, piece in enumerate(layers.pieces):
        types = {x: helper.np_dtype_to_tensor_dtype(values[0][x].dtype)
                 for x in piece.inputs if x in values[0]}
        path = where / f".piece-{k}.onnx"
        onnx.save_model(piece_model(model, layers, k, types), str(path))
        try:
            _calibrate_piece(path, where, k, layers, last, values, ranges, calibrator)
        finally:
            _remove(where, f".piece-{k}.")
    return ranges


def _calibrate_piece(path: Path, where: Path, k: int, layers: Layers, last: dict[str, int],
                     values: list[dict[str, np.ndarray]], ranges: dict[str, Any],
                     calibrator: Callable[[Path, Path], Any]) -> None:
    """Piece k's ranges into `ranges`, and into `values` what later pieces read of it."""
    import onnxruntime as ort

    piece = layers.pieces[k]
    fed = [{x: v[x] for x in piece.inputs} for v in values]
    with tempfile.TemporaryDirectory(prefix="calibrate.", dir=where) as tmp:
        found = calibrator(path, Path(tmp) / "augmented.onnx")  # its weights' copy: tmp
        found.collect_data(_Reader(fed))
        ranges.update(found.compute_data().data)
        providers = found.execution_providers
        del found
    later = [x for x in piece.outputs if last.get(x, -1) > k]
    if later:  # what the later pieces read, run as the calibrator runs the piece
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(path), so, providers=providers)
        for v, f in zip(values, fed, strict=True):
            v.update(zip(later, session.run(later, f), strict=True))
        del session
    for v in values:
        for x in [x for x in v if last.get(x, -1) <= k]:
            del v[x]


class _Reader:
    """A calibration data reader over a list of feeds."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.it = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.it, None)


def _remove(where: Path, prefix: str) -> None:
    for f in where.glob(f"{prefix}*"):
        f.unlink()


def quantize(model: onnx.ModelProto, layers: Layers, where: Path,
             piece: Callable[[Path, int, set[str]], onnx.ModelProto]) -> onnx.ModelProto:
    """Quantize each piece with `piece(float model path, k, the tensors it names)`, which gives
    the quantized piece (its weights saved beside it); the stitched whole."""
    done = []
    for k, p in enumerate(layers.pieces):
        path = where / f".piece-{k}.onnx"
        float_piece = piece_model(model, layers, k)
        onnx.save_model(float_piece, str(path))
        names = {x for n in float_piece.graph.node for x in [*used_names(n), *n.output]}
        try:
            done.append(piece(path, k, names | set(p.inputs)))
        finally:
            _remove(where, f".piece-{k}.")
    return stitch(model, layers, done)


def stitch(model: onnx.ModelProto, layers: Layers, done: list[onnx.ModelProto]
           ) -> onnx.ModelProto:
    """One model of the quantized pieces, as the whole graph's quantization makes it."""
    outputs = {o.name for o in model.graph.output}
    nodes = [n for m in done for n in m.graph.node]
    by_name: dict[str, list[tuple[int, onnx.NodeProto]]] = {}
    for k, m in enumerate(done):
        for n in m.graph.node:
            by_name.setdefault(n.name, []).append((k, n))
    maker = {x: k for k, p in enumerate(layers.pieces) for x in p.outputs}
    doubtful = unsure(layers)
    dropped: set[int] = set()
    for x in sorted({x for p in layers.pieces for x in p.inputs}):
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
    return _assemble(model, done, _ordered(_once([n for n in nodes if id(n) not in dropped])))


# ops ONNX Runtime quantizes only when their input already is, at their input's scale
FOLLOWERS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice",
                       "AveragePool", "TopK", "Gather", "GatherElements", "Split", "Where",
                       "Relu", "Clip", "MaxPool", "Resize", "Pad"})


def _followed(x: str, q: onnx.NodeProto, later: list[onnx.ModelProto],
              by_name: dict[str, list[tuple[int, onnx.NodeProto]]]) -> None:
    """Raise Unstitched where a later piece read the quantized `x` with an op that follows its
    input's quantization (FOLLOWERS) and quantized it otherwise than the whole graph would: the
    whole graph's quantizer knows `x` is quantized when it reaches that op, and gives its output
    `x`'s scale; a piece alone may not know."""
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
    """Do two tensors hold the same values? A saved weight's location names its digest."""
    if a.data_type != b.data_type or list(a.dims) != list(b.dims):
        return False
    if a.external_data or b.external_data:
        return [(e.key, e.value) for e in a.external_data] == \
            [(e.key, e.value) for e in b.external_data]
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


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
