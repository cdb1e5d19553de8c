"""Each innermost module's own loss in a QDQ graph: how much SQNR its outputs, as the graph
passes them on (through their Q/DQ), lose against its worst input as it reads it
(executors/onnx/accuracy.py measures both against the fp32 graph). A module whose inputs are
exact (graph inputs) owns all of its outputs' error."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from executors.onnx import accuracy as A

# ops that move data: a module owning only these between its children is not a block
MOVES = frozenset({*A.QDQ_OPS, "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze",
                   "Identity", "Cast", "Expand", "Shape", "Concat", "Slice"})
EXACT_DB = 80.0  # what an input without error counts as (float32 against 16-bit: ~90 dB)


def source_tensor(name: str, made_by: dict[str, onnx.NodeProto]) -> str:
    """The tensor a Q -> DQ chain copies (the name itself when it is no such copy)."""
    while name in made_by and made_by[name].op_type in A.QDQ_OPS:
        name = made_by[name].input[0]
    return name


def blocks(qdq: onnx.ModelProto) -> list[str]:
    """The modules a search raises: those whose own nodes compute (not only move data between
    children), below the root, with no such module above them (BertIntermediate with its GELU,
    not the GELU alone; BertLayer's attention and MLP parts, not the layer)."""
    owners = {A.node_tag(n) for n in qdq.graph.node if n.op_type not in MOVES}
    owners.discard(A.UNTAGGED)
    root = min(owners, key=len) if owners else ""
    inner = owners - {root}
    return sorted(m for m in inner if not any(a in inner for a in A.lineage(m)[:-1]))


def dequantized(qdq: onnx.ModelProto, pairs: dict[str, str]) -> dict[str, str]:
    """{tensor: its Q -> DQ copy} for the compared tensors: what the graph's readers see."""
    q_of = {n.input[0]: n.output[0] for n in qdq.graph.node if n.op_type == "QuantizeLinear"}
    dq_of = {n.input[0]: n.output[0] for n in qdq.graph.node
             if n.op_type == "DequantizeLinear"}
    return {t: dq_of[q_of[t]] for t in pairs if t in q_of and q_of[t] in dq_of}


def _merged(names: list[str], stats: dict[str, A.Stats]) -> A.Stats:
    total = A.Stats()
    for name in dict.fromkeys(names):
        if name in stats:
            total.merge(stats[name])
    return total


def _inputs(qdq: onnx.ModelProto, module: str) -> list[str]:
    """The tensors the module's nodes read, as they read them, that nodes outside make."""
    made_by = {o: n for n in qdq.graph.node for o in n.output}
    found = []
    for node in qdq.graph.node:
        if node.op_type in A.QDQ_OPS or not A.in_module(A.node_tag(node), module):
            continue
        for name in filter(None, node.input):
            maker = made_by.get(source_tensor(name, made_by))
            if maker is None or not A.in_module(A.node_tag(maker), module):
                found.append(name)
    return found


def _db(stats: A.Stats) -> float:
    return min(stats.sqnr_db(), EXACT_DB) if stats.values else EXACT_DB


def own_losses(fp32: onnx.ModelProto, qdq: onnx.ModelProto,
               feeds: list[dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """The blocks, the one adding the most noise first: tag, SQNR of its worst input as it
    reads it and of its outputs as the graph passes them on (quantized), in dB, their
    difference, and the noise-to-signal power it adds (what the ranking uses: a dB drop from
    an exact input overstates a module that feeds from the graph's inputs)."""
    pairs = A.common_tensors(fp32, qdq)
    views = dequantized(qdq, pairs)
    stats = A.tensor_stats(fp32, qdq, pairs | {d: pairs[t] for t, d in views.items()}, feeds)
    outs, _nodes = A.module_outputs(qdq, pairs)
    rows = []
    for module in (m for m in blocks(qdq) if m in outs):
        # the worst input: a large-valued input (an attention mask) would hide the others
        sqnr_in = min((_db(stats[n]) for n in dict.fromkeys(_inputs(qdq, module))
                       if n in stats), default=EXACT_DB)
        sqnr_out = _db(_merged([views.get(t, t) for t in outs[module]], stats))
        rows.append({"tag": module, "sqnr_in_db": sqnr_in, "sqnr_out_db": sqnr_out,
                     "own_loss_db": sqnr_in - sqnr_out,
                     "added_nsr": 10 ** (-sqnr_out / 10) - 10 ** (-sqnr_in / 10)})
    return sorted(rows, key=lambda r: -r["added_nsr"])
