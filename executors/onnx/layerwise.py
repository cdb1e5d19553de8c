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

import math
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from executors.onnx.stitch import Unstitched, stitch_pieces
from executors.onnx.subgraph import assign, blocks, used_names, value_infos
from planner.core.memory import LAYERWISE_FROM

PIECE_BYTES = 512 * 2**20  # a piece's fp32 weights, at most (a piece holds one block at least)


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
    return Layers(block, _pieces(graph, where, parts), value_infos(model))


# inputs ONNX Runtime quantizes as int32 biases (scale: input scale x weight scale)
BIASES = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2, "LayerNormalization": 2,
          "InstanceNormalization": 2, "BatchNormalization": 2}


def unshare_biases(graph: onnx.GraphProto, quantized: Callable[[onnx.NodeProto], bool],
                   overridden: set[str]) -> int:
    """Give every reader of a shared bias that ONNX Runtime's quantizer quantizes (`quantized`:
    its node filter), but the first, its own copy, in the graph's order and named as that
    quantizer names the copies it makes (a bias's int32 values depend on its reader's scales):
    the bias's name and the number after the largest one that follows that name among the
    initializers. A piece alone would number its copies from its own initializers; copied
    before the pieces are made, no piece sees a shared bias, and the copies bear the whole
    graph's names. A bias with a tensor override (`overridden`: quantized as a weight) or not
    float is left shared, as the quantizer leaves it; a reader whose name is empty or another
    node's (the quantizer rewires by name) raises Unstitched. A copy reads the bias's own bytes
    (its external data's location). How many copies were made."""
    inits = {i.name: i for i in graph.initializer}
    named = Counter(n.name for n in graph.node)
    seen: set[str] = set()
    made = 0
    for node in graph.node:
        at = BIASES.get(node.op_type)
        if at is None or len(node.input) <= at or node.input[at] not in inits \
                or not quantized(node):
            continue
        name = node.input[at]
        if name in overridden or inits[name].data_type not in (onnx.TensorProto.FLOAT,
                                                                onnx.TensorProto.FLOAT16):
            continue
        if name not in seen:
            seen.add(name)
            continue
        if not node.name or named[node.name] > 1:
            raise Unstitched(f"bias {name!r} is shared by a node named {node.name!r}, which "
                             "is not one node's name")
        copy = onnx.TensorProto()
        copy.CopyFrom(inits[name])
        copy.name = f"{name}{_largest_suffix(inits, name) + 1}"
        graph.initializer.append(copy)
        inits[copy.name] = copy
        node.input[at] = copy.name
        made += 1
    return made


def _largest_suffix(names: dict[str, Any], prefix: str) -> int:
    """The largest number that follows `prefix` in `names` (-1: none), as ONNX Runtime's
    quantizer finds it."""
    largest = -1
    for name in names:
        if name.startswith(prefix):
            try:
                largest = max(largest, int(name[len(prefix):]))
            except ValueError:
                continue
    return largest


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
        found.collect_data(FeedReader(fed))
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


class FeedReader:
    """ONNX Runtime's calibration data reader over a list of feeds."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.it = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.it, None)


def _remove(where: Path, prefix: str) -> None:
    for f in where.glob(f"{prefix}*"):
        f.unlink()


def quantize(model: onnx.ModelProto, layers: Layers, where: Path,
             piece: Callable[[Path, int, set[str], set[str]], onnx.ModelProto]
             ) -> onnx.ModelProto:
    """Quantize each piece with `piece(float model path, k, the tensors it names, its inputs
    the earlier pieces quantized)`, which gives the quantized piece (its weights saved beside
    it); the stitched whole. The whole graph's quantizer reaches a piece's nodes knowing which
    of their inputs the nodes before them quantized: an op that follows its input's
    quantization (a Reshape, a Gather) quantizes its output only then, so a piece is told."""
    done: list[onnx.ModelProto] = []
    quantized: set[str] = set()
    touched = _touched(model.graph, layers)
    for k, p in enumerate(layers.pieces):
        path = where / f".piece-{k}.onnx"
        float_piece = piece_model(model, layers, k)
        onnx.save_model(float_piece, str(path))
        names = {x for n in float_piece.graph.node for x in [*used_names(n), *n.output]}
        try:
            told = {x for x in quantized & set(p.inputs) if _first_here(touched[x], k)}
            done.append(piece(path, k, names | set(p.inputs), told))
        finally:
            _remove(where, f".piece-{k}.")
        quantized |= {n.name.removesuffix("_QuantizeLinear") for n in done[-1].graph.node
                      if n.op_type == "QuantizeLinear"}
    return stitch(model, layers, done)


def _touched(graph: onnx.GraphProto, layers: Layers) -> dict[str, list[tuple[int, int]]]:
    """For each tensor, where the nodes that make or read it stand: (position in the graph,
    piece)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for k, p in enumerate(layers.pieces):
        for i in p.nodes:
            node = graph.node[i]
            for x in {*used_names(node), *node.output}:
                out.setdefault(x, []).append((i, k))
    return out


def _first_here(touched: list[tuple[int, int]], k: int) -> bool:
    """Whether every node of an earlier piece that makes or reads a tensor stands before the
    first node of piece k that reads it: the whole graph's quantizer, which visits nodes in the
    graph's order, then knows whether it is quantized when it reaches piece k's readers."""
    here = [i for i, j in touched if j == k]
    if not here:
        return False
    first = min(here)
    return all(i < first for i, j in touched if j < k)


def stitch(model: onnx.ModelProto, layers: Layers, done: list[onnx.ModelProto]
           ) -> onnx.ModelProto:
    """The quantized pieces `done` as one model (executors/onnx/stitch.py)."""
    return stitch_pieces(model, {x for p in layers.pieces for x in p.inputs},
                         {x: k for k, p in enumerate(layers.pieces) for x in p.outputs},
                         unsure(layers), done)
