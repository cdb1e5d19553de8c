"""Each block's own error in a QDQ graph: the block cut out of the graph (with the Q/DQ in front
of its inputs, executors/onnx/subgraph.py) and fed the fp32 graph's values, its outputs against
the fp32 graph's (SQNR). In the whole graph a block's error is mostly inherited and amplified
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
    tags = [A.node_tag(n) for n in qdq.graph.node]
    cuts = []
    for block in blocks(qdq):
        chosen = [i for i, n in enumerate(qdq.graph.node)
                  if n.op_type not in A.QDQ_OPS and A.in_module(tags[i], block)]
        cuts.append(S.cut(qdq.graph, block, chosen))
    ref = A.common_tensors(fp32, qdq)  # the fp32 name of a tensor the quantizer renamed
    ref |= {x: x for c in cuts for x in c.inputs if x not in ref}
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
