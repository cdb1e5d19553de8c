"""Each innermost module's own loss in a QDQ graph: how much SQNR its outputs lose against what
its inputs already carried (executors/onnx/accuracy.py measures both against the fp32 graph).
A module whose inputs are exact (graph inputs) owns all of its outputs' error."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from executors.onnx import accuracy as A

EXACT_DB = 80.0  # what an input without error counts as (float32 against 16-bit: ~90 dB)


def source_tensor(name: str, made_by: dict[str, onnx.NodeProto]) -> str:
    """The tensor a Q -> DQ chain copies (the name itself when it is no such copy)."""
    while name in made_by and made_by[name].op_type in A.QDQ_OPS:
        name = made_by[name].input[0]
    return name


def innermost(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of modules no other row lies inside."""
    tags = [r["tag"] for r in rows]
    return [r for r in rows if r["tag"] != A.UNTAGGED and
            not any(t != r["tag"] and A.in_module(t, r["tag"]) for t in tags)]


def input_stats(qdq: onnx.ModelProto, module: str,
                stats: dict[str, A.Stats]) -> A.Stats:
    """The error the module's inputs carry: the float tensors its nodes read (through Q/DQ)
    that nodes outside it make."""
    made_by = {o: n for n in qdq.graph.node for o in n.output}
    total, seen = A.Stats(), set()
    for node in qdq.graph.node:
        if node.op_type in A.QDQ_OPS or not A.in_module(A.node_tag(node), module):
            continue
        for name in node.input:
            src = source_tensor(name, made_by) if name else ""
            maker = made_by.get(src)
            outside = maker is None or not A.in_module(A.node_tag(maker), module)
            if src in stats and outside and src not in seen:
                seen.add(src)
                total.merge(stats[src])
    return total


def own_losses(fp32: onnx.ModelProto, qdq: onnx.ModelProto,
               feeds: list[dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """Innermost modules, worst own loss first: tag, SQNR in and out (dB), own loss (dB)."""
    pairs = A.common_tensors(fp32, qdq)
    stats = A.tensor_stats(fp32, qdq, pairs, feeds)
    out = []
    for row in innermost(A.module_rows(qdq, stats)):
        got_in = input_stats(qdq, row["tag"], stats)
        sqnr_in = min(got_in.sqnr_db(), EXACT_DB) if got_in.values else EXACT_DB
        sqnr_out = row["sqnr_db"] if math.isfinite(row["sqnr_db"]) else EXACT_DB
        out.append({"tag": row["tag"], "sqnr_in_db": sqnr_in, "sqnr_out_db": sqnr_out,
                    "own_loss_db": sqnr_in - min(sqnr_out, EXACT_DB)})
    return sorted(out, key=lambda r: -r["own_loss_db"])
