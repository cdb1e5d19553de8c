"""A module's own error: its piece of the QDQ graph run alone on the fp32 graph's values.

The cumulative figure of a module (executors/diagnosis/module_error.py) carries the error of every
module before it. Its own error is what its piece adds: the piece (executors/onnx/subgraph.py,
the module's nodes with the Q/DQ chains in front of its inputs) is fed the values the fp32
graph has at the piece's inputs, and its outputs are compared with the fp32 graph's. What the
cumulative figure loses beyond that is inherited. The one implementation for `diagnose`
(executors/diagnosis/module_error.py), the target's pieces (target_error.py) and the repair search
(executors/steps/quant_search.py), which reads a piece's inputs dequantized instead
(`inputs="dequantized"`: the Q/DQ in front of them that the module does not own is dropped,
since raising the module's precision does not change its producer's type).

A piece's input takes the fp32 graph's tensor of the same value (the same name, or the name
`common_tensors` pairs it with); a tensor the fp32 graph has no counterpart for (rare: a
quantizer-made tensor that is no Q/DQ copy) takes the QDQ graph's own value and is counted in
`qdq_fed`, so a reader knows the figure is not wholly the module's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from executors.onnx import subgraph
from executors.onnx.graph_edit import elem_types

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
INPUTS = ("quantized", "dequantized")  # what a piece reads: see plan_pieces


@dataclass
class Piece:
    """One module's piece: what it reads and which of its tensors are compared."""

    tag: str
    cut: subgraph.Cut
    outputs: list[str]                 # QDQ names of the compared tensors (piece outputs)
    refs: list[str]                    # the fp32 name each output is compared with
    feeds: dict[str, tuple[str, str]]  # piece input -> ("fp32" | "qdq", name in that graph)
    types: dict[str, int] = field(default_factory=dict)  # the QDQ graph's type of its tensors
    model: onnx.ModelProto | None = None
    session: Any = None
    error: str | None = None           # why the piece could not run
    stats: list[Any] = field(default_factory=list)

    @property
    def qdq_fed(self) -> int:
        return sum(1 for side, _ in self.feeds.values() if side == "qdq")


def fp32_names(fp32: onnx.ModelProto) -> set[str]:
    """Every tensor the fp32 graph makes or takes in."""
    return {o for n in fp32.graph.node for o in n.output if o} | \
        {i.name for i in fp32.graph.input}


def through_qdq(qdq: onnx.ModelProto, names: list[str]) -> dict[str, tuple[str, list[int]]]:
    """{tensor: (its Q -> DQ copy, the indices of that Q and DQ)} for tensors with one."""
    nodes = list(qdq.graph.node)
    q_of = {n.input[0]: i for i, n in enumerate(nodes) if n.op_type == "QuantizeLinear"}
    dq_of = {n.input[0]: i for i, n in enumerate(nodes) if n.op_type == "DequantizeLinear"}
    out = {}
    for name in names:
        q = q_of.get(name)
        dq = dq_of.get(nodes[q].output[0]) if q is not None else None
        if dq is not None:
            out[name] = (nodes[dq].output[0], [q, dq])
    return out


def plan_pieces(fp32: onnx.ModelProto, qdq: onnx.ModelProto, pairs: dict[str, str],
                outs: dict[str, list[str]], modules: Iterable[str],
                quantized_outputs: bool = False, inputs: str = "quantized") -> list[Piece]:
    """The pieces of `modules` (tags with compared outputs in `outs`). With
    `quantized_outputs`, a piece's outputs are its output tensors' Q -> DQ copies (what a
    quantized backend hands on), else the float tensors themselves (as the cumulative
    figure compares them). `inputs`: "quantized" keeps the Q/DQ chains in front of the
    piece's inputs (their quantization counted as the module's own), "dequantized" drops
    those the module does not own and feeds the dequantized values (what raising the
    module's precision leaves as it is: its inputs quantize at their producer's type)."""
    if inputs not in INPUTS:
        raise ValueError(f"inputs={inputs!r}: one of {', '.join(INPUTS)}")
    tags = subgraph.node_tags(qdq.graph)
    have = fp32_names(fp32)
    types = elem_types(qdq)
    made_by = {o: n for n in qdq.graph.node for o in n.output}
    pieces = []
    for tag in modules:
        chosen = subgraph.members(tags, tag)
        names = list(dict.fromkeys(outs.get(tag, [])))
        if not chosen or not names:
            continue
        copies = through_qdq(qdq, names) if quantized_outputs else {}
        extra = sorted({i for _, idx in copies.values() for i in idx} - set(chosen))
        c = subgraph.cut(qdq.graph, tag, sorted({*chosen, *extra}))
        if inputs == "dequantized":
            c = reading_dequantized(qdq, c, tags)
        c = needed(qdq.graph, c, [copies.get(n, (n,))[0] for n in names])
        refs = {x: fp32_name(x, pairs, made_by) for x in c.inputs}
        feeds = {x: ("fp32", refs[x]) if refs[x] in have else ("qdq", x) for x in c.inputs}
        outputs = [copies.get(n, (n,))[0] for n in names]
        pieces.append(Piece(tag, c, outputs, [pairs[n] for n in names], feeds,
                            {x: types[x] for x in [*c.inputs, *outputs] if x in types}))
    return pieces


def fp32_name(x: str, pairs: dict[str, str], made_by: dict[str, onnx.NodeProto]) -> str:
    """The fp32 graph's name of the value a piece's input `x` holds: its pair, or the pair of
    the tensor its Q -> DQ chain copies (a dequantized input)."""
    src = source_tensor(x, made_by)
    return pairs.get(x, pairs.get(src, src))


def source_tensor(name: str, made_by: dict[str, onnx.NodeProto]) -> str:
    """The tensor a Q -> DQ chain copies (the name itself when it is no such copy)."""
    while name in made_by and made_by[name].op_type in QDQ_OPS:
        name = made_by[name].input[0]
    return name


def reading_dequantized(qdq: onnx.ModelProto, c: subgraph.Cut,
                        tags: list[str | None]) -> subgraph.Cut:
    """The cut without the Q/DQ of activations in front of its inputs that the module does not
    own: it reads the dequantized values instead."""
    nodes = qdq.graph.node
    inits = {i.name for i in qdq.graph.initializer}
    keep = [i for i in c.keep if not (nodes[i].op_type in QDQ_OPS and nodes[i].input[0]
                                      not in inits and not subgraph.under(tags[i], c.tag))]
    made = {o for i in keep for o in nodes[i].output}
    ins = list(dict.fromkeys(x for i in keep for x in subgraph.used_names(nodes[i])
                             if x not in made and x not in inits))
    return subgraph.Cut(c.tag, keep, ins, c.outputs, c.module_nodes)


def needed(graph: onnx.GraphProto, c: subgraph.Cut, outputs: list[str]) -> subgraph.Cut:
    """The cut with only the nodes (and inputs) the compared outputs depend on: a node whose
    outputs nothing in the piece reads would leave ONNX Runtime unused initializers."""
    nodes, todo, keep = list(graph.node), set(outputs), set()
    for i in reversed(c.keep):
        if any(o in todo for o in nodes[i].output):
            keep.add(i)
            todo.update(subgraph.used_names(nodes[i]))
    return subgraph.Cut(c.tag, sorted(keep), [x for x in c.inputs if x in todo], outputs,
                        c.module_nodes)


def wanted(pieces: list[Piece]) -> tuple[set[str], set[str]]:
    """(fp32 tensors, QDQ tensors) the pieces' inputs are fed from and compared with."""
    fp32 = {n for p in pieces for side, n in p.feeds.values() if side == "fp32"}
    fp32 |= {n for p in pieces for n in p.refs}
    qdq = {n for p in pieces for side, n in p.feeds.values() if side == "qdq"}
    return fp32, qdq


def feed_of(piece: Piece, want: dict[str, np.ndarray],
            got: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The piece's inputs: fp32 values in the type the QDQ graph holds there (float16 in an
    fp16 graph), else the QDQ graph's own."""
    return {x: as_type(want[name], piece.types.get(x)) if side == "fp32" else got[name]
            for x, (side, name) in piece.feeds.items()}


def as_type(value: np.ndarray, elem_type: int | None) -> np.ndarray:
    """A float value in another float type the graph holds (an integer one as it is)."""
    if elem_type is None or value.dtype.kind != "f":
        return value
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    if dtype.kind != "f" or dtype == value.dtype:
        return value
    with np.errstate(over="ignore"):  # beyond float16's range is +-inf, as a Cast makes it
        return value.astype(dtype)


def piece_model(qdq: onnx.ModelProto, piece: Piece,
                feed: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The piece as a model: its inputs typed and shaped as the values fed to it, its outputs
    the compared tensors (float)."""
    infos = {x: onnx.helper.make_tensor_value_info(
        x, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for x, v in feed.items()}
    infos |= {o: onnx.helper.make_tensor_value_info(
        o, piece.types.get(o, onnx.TensorProto.FLOAT), None) for o in piece.outputs}
    return subgraph.build(qdq, piece.cut, infos)


Sample = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]  # (fp32 values, QDQ values)


def kept(pieces: list[Piece], want: dict[str, np.ndarray],
         got: dict[str, np.ndarray]) -> Sample:
    """Of one sample's values, those the pieces read or compare with."""
    from_fp32, from_qdq = wanted(pieces)
    return {n: want[n] for n in from_fp32}, {n: got[n] for n in from_qdq}


def run_pieces(qdq: onnx.ModelProto, pieces: list[Piece], samples: list[Sample],
               make_session: Callable[[Piece], Any], new_stats: Callable[[], Any],
               progress: Callable[[Piece, int], None] | None = None) -> None:
    """Run each piece on every sample, one piece open at a time, and add its outputs against
    the fp32 values to its stats (one Stats per output). A piece is built from its first
    sample's values; one that cannot be opened or run keeps its error and no stats."""
    for piece in pieces:
        try:
            for i, (want, got) in enumerate(samples):
                feed = feed_of(piece, want, got)
                if progress:
                    progress(piece, i)
                if piece.session is None:
                    piece.model = piece_model(qdq, piece, feed)
                    piece.session = make_session(piece)
                    piece.stats = [new_stats() for _ in piece.outputs]
                values = piece.session.run(piece.outputs, feed)
                for stats, ref, value in zip(piece.stats, piece.refs, values, strict=True):
                    if want[ref].shape == value.shape:
                        stats.add(want[ref], value)
        except Exception as exc:  # noqa: BLE001 - one piece that will not run is reported
            piece.error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            piece.stats = []
        finally:
            piece.session = piece.model = None  # one piece's weights in memory at a time
