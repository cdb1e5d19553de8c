"""Each block's own error in a QDQ graph: the block cut out of the graph (executors/onnx/
subgraph.py) and fed the fp32 graph's values where it reads its inputs (after their Q/DQ), its
outputs against the fp32 graph's (SQNR). In the whole graph a block's error is mostly inherited and amplified
(measured on MiniLM w8a8: an MLP block in float still loses 3 dB between its inputs and its
outputs), so a difference of the whole graph's SQNRs cannot tell which block to raise."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from executors.onnx import accuracy as A
from executors.onnx import subgraph as S

# ops that move data: a module owning only these between its children is not a block
MOVES = frozenset({*A.QDQ_OPS, "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze",
                   "Identity", "Cast", "Expand", "Shape", "Concat", "Slice"})


def blocks(qdq: onnx.ModelProto) -> list[str]:
    """The modules a search raises: those whose own nodes compute (not only move data between
    children), below the root, with no such module above them (BertIntermediate with its GELU,
    not the GELU alone; BertLayer's attention and MLP parts, not the layer)."""
    owners = {A.node_tag(n) for n in qdq.graph.node if n.op_type not in MOVES}
    owners.discard(A.UNTAGGED)
    root = min(owners, key=len) if owners else ""
    inner = owners - {root}
    return sorted(m for m in inner if not any(a in inner for a in A.lineage(m)[:-1]))


def _reading_dequantized(qdq: onnx.ModelProto, c: S.Cut, tags: list[str]) -> S.Cut:
    """The cut without the Q/DQ in front of its inputs (they quantize at their producer's type,
    which raising the block does not change): it reads the dequantized values instead."""
    nodes = qdq.graph.node
    inits = {i.name for i in qdq.graph.initializer}
    keep = [i for i in c.keep if not (nodes[i].op_type in A.QDQ_OPS and nodes[i].input[0]
                                      not in inits and not A.in_module(tags[i], c.tag))]
    made = {o for i in keep for o in nodes[i].output}
    inputs = list(dict.fromkeys(x for i in keep for x in S.used_names(nodes[i])
                                if x not in made and x not in inits))
    return S.Cut(c.tag, keep, inputs, c.outputs, c.module_nodes)


def source_tensor(name: str, made_by: dict[str, onnx.NodeProto]) -> str:
    """The tensor a Q -> DQ chain copies (the name itself when it is no such copy)."""
    while name in made_by and made_by[name].op_type in A.QDQ_OPS:
        name = made_by[name].input[0]
    return name


def _info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                         list(value.shape))


def reference_values(fp32: onnx.ModelProto, names: list[str],
                     feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The fp32 graph's values of `names` (and the feeds) on each feed."""
    have = {o for n in fp32.graph.node for o in n.output}
    wanted = [n for n in dict.fromkeys(names) if n in have]
    sess = A.session(A.exposed(fp32, wanted))
    outs = [o.name for o in sess.get_outputs() if o.name in wanted]
    found = []
    for feed in feeds:
        inputs = {i.name: feed[i.name] for i in sess.get_inputs() if i.name in feed}
        found.append({**feed, **dict(zip(outs, sess.run(outs, inputs), strict=True))})
    return found


def own_losses(fp32: onnx.ModelProto, qdq: onnx.ModelProto,
               feeds: list[dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """The blocks, worst own error first: tag and own SQNR (dB) of its outputs, the block fed
    the fp32 graph's values of its inputs."""
    nodes = qdq.graph.node
    tags = [A.node_tag(n) for n in nodes]
    cuts = []
    for block in blocks(qdq):
        chosen = [i for i, n in enumerate(qdq.graph.node)
                  if n.op_type not in A.QDQ_OPS and A.in_module(tags[i], block)]
        cuts.append(_reading_dequantized(qdq, S.cut(qdq.graph, block, chosen), tags))
    ref = A.common_tensors(fp32, qdq)  # the fp32 name of a tensor the quantizer renamed
    made_by = {o: n for n in nodes for o in n.output}
    for x in (x for c in cuts for x in c.inputs if x not in ref):
        src = source_tensor(x, made_by)  # a dequantized input: its tensor's fp32 value
        ref[x] = ref.get(src, src)
    values = reference_values(fp32, [ref.get(x, x) for c in cuts for x in [*c.inputs, *c.outputs]],
                              feeds)
    rows = []
    for c in cuts:
        names = [*c.inputs, *c.outputs]
        if not c.outputs or any(ref.get(x, x) not in values[0] for x in names):
            continue  # a tensor the fp32 graph does not have: not comparable
        infos = {x: _info(x, values[0][ref.get(x, x)]) for x in names}
        sess = A.session(S.build(qdq, c, infos).SerializeToString())
        total = A.Stats()
        for v in values:
            got = sess.run(c.outputs, {x: v[ref.get(x, x)] for x in c.inputs})
            for name, g in zip(c.outputs, got, strict=True):
                total.add(v[ref.get(name, name)], g)
        rows.append({"tag": c.tag, "own_sqnr_db": total.sqnr_db()})
    return sorted(rows, key=lambda r: r["own_sqnr_db"])
