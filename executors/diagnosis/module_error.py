"""Per-module error: where a quantized (QDQ) graph departs from its fp32 graph.

Both graphs run on the CPU EP with graph optimizations off (so no tensor is fused away) and
every float tensor that both produce under the same name exposed as an output. The QDQ
graph's nodes are grouped by hierarchy tag; a module's outputs are the float tensors its
nodes produce (not the Q/DQ copies) that a node outside it, or the graph's output, reads
(seen through Q -> DQ pairs). A parent module is the union of its children. Per module:
SQNR in dB, 10*log10(sum(ref^2) / sum((ref - q)^2)), and the cosine of all its output values,
over every sample: the cumulative figure. Its own figure (executors/diagnosis/own_error.py) is its
piece run alone on the fp32 values at its inputs; inherited = own - cumulative, in dB.

API: `compare(fp32, qdq, feeds, own=True | [tags] | False)` -> {"modules": rows in tree order
(tag, class, nodes, outputs, values, sqnr_db, cosine, own_sqnr_db, own_cosine, inherited), "graph",
"samples", "tensors"}; `diagnose(reference, candidate, source, samples)` does it on model files
with verify's inputs.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from executors.diagnosis import own_error
from executors.onnx import hierarchy
from executors.onnx.artifacts import TAG_KEY

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
UNTAGGED = "(untagged)"


@dataclass
class Stats:
    """Running sums over a set of tensors: what SQNR and cosine are made of."""

    ref2: float = 0.0   # sum(ref^2)
    q2: float = 0.0     # sum(q^2)
    err2: float = 0.0   # sum((ref - q)^2)
    dot: float = 0.0    # sum(ref * q)
    values: int = 0

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        r, g = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
        self.ref2 += float(r @ r)
        self.q2 += float(g @ g)
        self.err2 += float((r - g) @ (r - g))
        self.dot += float(r @ g)
        self.values += r.size

    def merge(self, other: Stats) -> None:
        self.ref2 += other.ref2
        self.q2 += other.q2
        self.err2 += other.err2
        self.dot += other.dot
        self.values += other.values

    def sqnr_db(self) -> float:
        if self.err2 == 0.0:
            return math.inf
        if self.ref2 == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.ref2 / self.err2)

    def cosine(self) -> float:
        if self.ref2 == 0.0 and self.q2 == 0.0:
            return 1.0
        return self.dot / max(math.sqrt(self.ref2 * self.q2), np.finfo(np.float64).tiny)


def node_tag(node: onnx.NodeProto) -> str:
    return next((p.value for p in node.metadata_props if p.key == TAG_KEY), UNTAGGED)


def in_module(tag: str, module: str) -> bool:
    return tag == module or tag.startswith(module + "/")


def float_names(model: onnx.ModelProto) -> tuple[set[str], set[str]]:
    """(names shape inference types as float32, names it types as anything else)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - an op it cannot type leaves the graph's own types
        inferred = model
    g = inferred.graph
    floats, others = set(), set()
    for v in [*g.value_info, *g.output, *g.input]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
            (floats if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
             else others).add(v.name)
    return floats, others


def common_tensors(fp32: onnx.ModelProto, qdq: onnx.ModelProto) -> dict[str, str]:
    """{QDQ graph tensor: the fp32 graph's tensor of the same value} for the float outputs of
    the QDQ graph's nodes (Q/DQ aside), in QDQ order: the same name, or, where the quantizer
    renamed an op's output, the name its Q -> DQ copy carries (a graph output's, say)."""
    made_fp32 = {o for n in fp32.graph.node for o in n.output if o}
    f_float, f_other = float_names(fp32)
    q_float, q_other = float_names(qdq)
    quantized = {n.input[0]: n.output[0] for n in qdq.graph.node if n.op_type == "QuantizeLinear"}
    dequantized = {n.input[0]: n.output[0] for n in qdq.graph.node
                   if n.op_type == "DequantizeLinear"}
    out = {}
    for node in qdq.graph.node:
        if node.op_type in QDQ_OPS:
            continue
        for name in node.output:
            ref = name if name in made_fp32 else dequantized.get(quantized.get(name, ""), "")
            if not name or ref not in made_fp32 or {name, ref} & (f_other | q_other):
                continue
            if ref in f_float or name in q_float or name in quantized:
                out[name] = ref
    return out


def readers(qdq: onnx.ModelProto) -> dict[str, list[str]]:
    """tensor -> the tags of the nodes that read it, seen through Q and DQ nodes; a graph
    output is read by "" (outside every module)."""
    direct: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in qdq.graph.node:
        for name in node.input:
            if name:
                direct[name].append(node)
    outputs = {o.name for o in qdq.graph.output}

    def tags(name: str, seen: frozenset[str]) -> list[str]:
        found = [""] if name in outputs else []
        for node in direct.get(name, []):
            if node.op_type in QDQ_OPS and node.output[0] not in seen:
                found += tags(node.output[0], seen | {node.output[0]})
            elif node.op_type not in QDQ_OPS:
                found.append(node_tag(node))
        return found

    return {name: tags(name, frozenset({name})) for name in {*direct, *outputs}}


def lineage(tag: str) -> list[str]:
    """A tag and its ancestors, root first: /A/B -> [/A, /A/B]."""
    return hierarchy.prefixes(tag) if tag.startswith("/") else [tag]


def module_outputs(qdq: onnx.ModelProto,
                   tensors: Iterable[str]) -> tuple[dict[str, list[str]], dict[str, int]]:
    """({module: its output tensors among `tensors`}, {module: nodes in it}) for every tag of
    the QDQ graph and every ancestor of one."""
    wanted, read_by = set(tensors), readers(qdq)
    outs: dict[str, list[str]] = defaultdict(list)
    nodes: dict[str, int] = defaultdict(int)
    for node in qdq.graph.node:
        tag = node_tag(node)
        for module in lineage(tag):
            nodes[module] += 1
        if node.op_type in QDQ_OPS:
            continue
        for name in node.output:
            if name not in wanted:
                continue
            for module in lineage(tag):
                if any(not in_module(r, module) for r in read_by.get(name, [])):
                    outs[module].append(name)
    return dict(outs), dict(nodes)


def exposed(model: onnx.ModelProto, names: Iterable[str], floats: Iterable[str] = ()) -> bytes:
    """A copy of `model` with `names` added as outputs (those not outputs already): typed
    float when in `floats`, else left for ONNX Runtime to type."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    have, typed = {o.name for o in copy.graph.output}, set(floats)
    for n in dict.fromkeys(names):
        if n in have:
            continue
        if n in typed:
            copy.graph.output.append(
                onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
        else:
            copy.graph.output.add(name=n)
    return copy.SerializeToString()


def session(model: bytes) -> Any:
    import onnxruntime as ort

    from executors.runtime.adapters import host_providers

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=host_providers())


class Runs:
    """The fp32 and the QDQ graph on the CPU EP, each exposing the tensors asked of it: one
    run of each per sample gives every value the comparison and the pieces read."""

    def __init__(self, fp32: onnx.ModelProto, qdq: onnx.ModelProto, fp32_wanted: Iterable[str],
                 qdq_wanted: Iterable[str], floats: tuple[Iterable[str], Iterable[str]]) -> None:
        inputs = {i.name for i in fp32.graph.input} | {i.name for i in qdq.graph.input}
        self.want_names = [n for n in dict.fromkeys(fp32_wanted) if n not in inputs]
        self.got_names = [n for n in dict.fromkeys(qdq_wanted) if n not in inputs]
        self.ref = session(exposed(fp32, self.want_names, floats[0]))
        self.q = session(exposed(qdq, self.got_names, floats[1]))

    def __call__(self, feed: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray],
                                                           dict[str, np.ndarray]]:
        """({fp32 tensor: value}, {QDQ tensor: value}), the graph inputs in both."""
        return {**feed, **_run(self.ref, self.want_names, feed)}, \
            {**feed, **_run(self.q, self.got_names, feed)}


def _run(sess: Any, names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{name: value} of `names` (none asked: no run; ORT would return every output)."""
    if not names:
        return {}
    return dict(zip(names, sess.run(names, _inputs(sess, feed)), strict=True))


def _inputs(sess: Any, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {i.name: feed[i.name] for i in sess.get_inputs() if i.name in feed}


def class_of(tag: str) -> str:
    """/BertModel/BertEncoder/BertLayer.0 -> BertLayer."""
    return tag.rsplit("/", 1)[-1].split(".", 1)[0]


def module_rows(qdq: onnx.ModelProto, stats: dict[str, Stats],
                own: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per module with compared outputs, in tree order (tag order); with `own`
    ({tag: Piece}), its own error and what it inherits (executors/diagnosis/own_error.py)."""
    outs, nodes = module_outputs(qdq, stats)
    rows = []
    for tag in sorted(outs):
        total = Stats()
        for name in dict.fromkeys(outs[tag]):
            total.merge(stats[name])
        row = {"tag": tag, "class": class_of(tag), "nodes": nodes[tag],
               "outputs": len(dict.fromkeys(outs[tag])), "values": total.values,
               "sqnr_db": total.sqnr_db(), "cosine": total.cosine()}
        if own is not None and tag in own:
            row |= own_fields(own[tag], row["sqnr_db"])
        rows.append(row)
    return rows


def own_fields(piece: Any, sqnr_db: float) -> dict[str, Any]:
    """A row's own error (SQNR, cosine) and the dB its cumulative figure inherits."""
    if piece.error or not piece.stats:
        return {"own_sqnr_db": None, "own_cosine": None, "inherited": None,
                "own_error": piece.error or "no sample ran"}
    total = Stats()
    for s in piece.stats:
        total.merge(s)
    own_db = total.sqnr_db()
    inherited = own_db - sqnr_db if math.isfinite(own_db) and math.isfinite(sqnr_db) else None
    return {"own_sqnr_db": own_db, "own_cosine": total.cosine(), "inherited": inherited,
            **({"qdq_fed": piece.qdq_fed} if piece.qdq_fed else {})}


def compared_tensors(fp32: onnx.ModelProto, qdq: onnx.ModelProto) -> dict[str, str]:
    """common_tensors() and the graph outputs both graphs have."""
    fp32_outputs = {o.name for o in fp32.graph.output}
    pairs = common_tensors(fp32, qdq)
    return pairs | {o.name: o.name for o in qdq.graph.output
                    if o.name in fp32_outputs and o.name not in pairs}


def compare(fp32: onnx.ModelProto, qdq: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
            own: bool | Iterable[str] = True,
            say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Per-module accuracy of `qdq` (tagged) against `fp32` on `feeds`: rows in tree order
    (cumulative `sqnr_db`, `cosine`; with `own`, for every module or the tags it names, also
    `own_sqnr_db`, `own_cosine` and `inherited`), and the whole graph's outputs as one row."""
    pairs = compared_tensors(fp32, qdq)
    outs, _ = module_outputs(qdq, pairs)
    tags = [t for t in outs if t != UNTAGGED] if own is True else [] if own is False else own
    pieces = own_error.plan_pieces(fp32, qdq, pairs, outs, tags)
    from_fp32, from_qdq = own_error.wanted(pieces)
    runs = Runs(fp32, qdq, [*pairs.values(), *from_fp32], [*pairs, *from_qdq],
                (pairs.values(), pairs))
    stats = {n: Stats() for n in pairs}
    samples = []
    progress = _progress(len(feeds), say)
    for feed in feeds:
        progress()
        want, got = runs(feed)
        for n, ref in pairs.items():
            if want[ref].shape == got[n].shape:
                stats[n].add(want[ref], got[n])
        samples.append(own_error.kept(pieces, want, got))
    graph_fed = {i.name for i in qdq.graph.input}
    for p in pieces:  # fed only the graph's inputs: the piece computes what the graph does
        if all(side == "fp32" and name in graph_fed for side, name in p.feeds.values()):
            p.stats = [stats[n] for n in p.outputs]
    own_error.run_pieces(qdq, [p for p in pieces if not p.stats], samples,
                         lambda p: session(p.model.SerializeToString()), Stats)
    stats = {n: s for n, s in stats.items() if s.values}
    whole = Stats()
    for o in qdq.graph.output:
        if o.name in stats:
            whole.merge(stats[o.name])
    return {"samples": len(feeds), "tensors": len(stats),
            "modules": module_rows(qdq, stats, {p.tag: p for p in pieces} if own else None),
            "graph": {"sqnr_db": whole.sqnr_db(), "cosine": whole.cosine()}}


def _progress(total: int, say: Callable[[str], None] | None) -> Callable[[], None]:
    """Called before each sample: after the first, how long all of them will take; then a line
    each tenth of the way (nothing without `say`)."""
    start, done = time.perf_counter(), [0]

    def step() -> None:
        n = done[0]
        done[0] += 1
        if say is None or n == 0:
            return
        spent = time.perf_counter() - start
        if n == 1 and total > 1:
            say(f"  diagnose: {total} samples at {spent:.2f} s each: about "
                f"{spent * (total - 1):.0f} s more (--samples N takes fewer)")
        elif n % max(1, total // 10) == 0:
            say(f"  diagnose: sample {n}/{total}, about {spent / n * (total - n):.0f} s left")

    return step


def own_pieces(fp32: onnx.ModelProto, qdq: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
               tags: Iterable[str], inputs: str = "quantized") -> list[own_error.Piece]:
    """The own error of each module of `tags` on `feeds` alone (no cumulative figure): its
    piece (executors/diagnosis/own_error.py, `inputs` as there) run on the CPU EP, its stats filled
    (or its error kept); own_fields() reads one."""
    pairs = compared_tensors(fp32, qdq)
    outs, _ = module_outputs(qdq, pairs)
    pieces = own_error.plan_pieces(fp32, qdq, pairs, outs, tags, inputs=inputs)
    runs = Runs(fp32, qdq, *own_error.wanted(pieces), ((), ()))
    samples = [own_error.kept(pieces, *runs(feed)) for feed in feeds]
    own_error.run_pieces(qdq, pieces, samples, lambda p: session(p.model.SerializeToString()),
                         Stats)
    return pieces


def diagnose(reference: Path, candidate: Path, source: Path | None, samples: int,
             say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """compare() on the files of a run: the fp32 reference and the tagged QDQ candidate, on
    `samples` verify inputs made as the verify step makes them."""
    from executors.onnx.artifacts import load
    from executors.onnx.iospecs import io_specs
    from executors.samples import Samples

    specs, _ = io_specs(reference)
    made = Samples(specs, "verify", source=source)
    if say is not None:
        say(f"  diagnose: making {samples} verify input(s)")
    result = compare(load(reference), load(candidate), made.feeds(samples), say=say)
    return {**result, "data": made.origin, "reference": str(reference),
            "candidate": str(candidate)}
