"""Encodings the QNN EP's HTP backend requires equal, made equal in a QDQ graph after the
quantizer: a Gather's output carries its data input's scale and zero point. ONNX Runtime's
quantizer calibrates the output of a Gather over an activation on the output's own range, and
where both ranges are near zero (an untrained model's convolution state: Zamba's Mamba state
within 1e-4) it floors both scales to one value while their zero points differ, which HTP
declines (measured, onnxruntime-qnn 2.7.0: "has incorrect Value -1835, expected equal to
-1361"; CPU fallback off, the compile fails; with scales that differ it compiles). A Gather
selects values of its data, so the data's encoding represents its output exactly, and reading
it that way loses nothing.

A Concat's inputs and output take one encoding. HTP reads a Concat's inputs as if they had its
output's encoding (measured, onnxruntime-qnn 2.7.0, GLM-4V's interleaved rotary embedding: a
Concat of `-x_odd` and `x_even` whose zero points differ by 12272 codes came out offset by
0.26 on values within 0.39, cosine 0.67 against the CPU EP on the same QDQ graph; with its
inputs given the output's encoding, 0.9997). One encoding covering every range of the group
represents each input and the output exactly enough; in 16 bits the wider range costs a
fraction of a bit.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from executors.onnx import graph_edit
from executors.onnx.graph_edit import drop_unread_initializers

SAME_AS_DATA = ("Gather",)


def gathers_share_encodings(model: onnx.ModelProto) -> int:
    """Each Gather whose data comes from a DequantizeLinear and whose output goes to
    QuantizeLinear nodes only: those Qs, and the DQs that read them, take the data's scale and
    zero point (a per-tensor one of the same type: others are left). How many Gathers changed."""
    types = {i.name: i.data_type for i in model.graph.initializer}
    scalars = {i.name for i in model.graph.initializer if not i.dims}
    producer = {o: n for n in model.graph.node for o in n.output}
    outputs = {o.name for o in model.graph.output}
    readers = graph_edit.readers(model)
    count, dropped = 0, []
    for node in [n for n in model.graph.node if n.op_type in SAME_AS_DATA]:
        dq = producer.get(node.input[0])
        qs = readers.get(node.output[0], [])
        if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 3 or not qs \
                or dq.input[1] not in scalars \
                or any(q.op_type != "QuantizeLinear" or len(q.input) < 3 for q in qs):
            continue
        wanted = list(dq.input[1:3])
        changed = False
        for q in qs:
            if list(q.input[1:3]) == wanted or types.get(q.input[2]) != types.get(wanted[1]) \
                    or q.input[2] not in types or q.output[0] in outputs \
                    or any(r.op_type != "DequantizeLinear" for r in readers.get(q.output[0], [])):
                continue  # its codes read by something other than a DQ: left as they are
            dropped.extend(q.input[1:3])
            for reader in [q, *readers.get(q.output[0], [])]:  # the Q and its DQs
                reader.input[1], reader.input[2] = wanted
            changed = True
        count += changed
    drop_unread_initializers(model, dropped)
    return count


def concats_share_encodings(model: onnx.ModelProto) -> int:
    """Each Concat whose inputs are dequantized activations (each from a QuantizeLinear) and
    whose output goes to QuantizeLinear nodes only: the encodings of those Qs, and of every Q
    and DQ that reads the same scale and zero point (ONNX Runtime's quantizer shares one across
    a Reshape or an Unsqueeze; gathers_share_encodings gives a Gather's output its data's),
    become one per-tensor encoding covering all their ranges. Concats linked through a shared
    encoding are one group. A group that holds a constant's codes, a graph output, codes read
    by anything but a DQ, or per-channel or mixed types is left as it is. How many Concats
    changed."""
    consts = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    readers = graph_edit.readers(model)
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(pair: tuple[str, str]) -> tuple[str, str]:
        while parent.setdefault(pair, pair) != pair:
            pair = parent[pair]
        return pair

    concats: dict[str, tuple[str, str]] = {}  # a Concat's output -> one of its group's encodings
    for node in [n for n in model.graph.node if n.op_type == "Concat"]:
        qs = _group(node, producer, readers)
        if qs is None:
            continue
        pairs = [(q.input[1], q.input[2]) for q in qs]
        for pair in pairs[1:]:
            parent[root(pair)] = root(pairs[0])
        concats[node.output[0]] = pairs[0]
    users: dict[tuple[str, str], list[onnx.NodeProto]] = {}  # every Q and DQ of each group
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) == 3 and \
                (pair := (node.input[1], node.input[2])) in parent:
            users.setdefault(root(pair), []).append(node)
    outputs = {o.name for o in model.graph.output}
    shared: set[tuple[str, str]] = set()
    taken = {i.name for i in model.graph.initializer}
    for group, nodes in users.items():
        made = _union(group, nodes, consts, producer, readers, outputs, taken)
        if made is None:
            continue
        model.graph.initializer.extend(made)
        names = (made[0].name, made[1].name)
        taken.update(names)
        for node in nodes:
            node.input[1], node.input[2] = names
        shared.add(group)
    drop_unread_initializers(model, [n for pair in parent for n in pair])
    return sum(root(pair) in shared for pair in concats.values())


def _group(concat: onnx.NodeProto, producer: dict[str, onnx.NodeProto],
           readers: dict[str, list[onnx.NodeProto]]) -> list[onnx.NodeProto] | None:
    """The Qs of `concat`'s inputs and output; None where one of its inputs is not a DQ of a
    Q's codes, or its output is read by other than Qs."""
    dqs = [producer.get(name) for name in concat.input]
    if any(dq is None or dq.op_type != "DequantizeLinear" for dq in dqs):
        return None
    qs = [producer.get(dq.input[0]) for dq in dqs] + readers.get(concat.output[0], [])
    if not readers.get(concat.output[0]) or \
            any(q is None or q.op_type != "QuantizeLinear" or len(q.input) < 3 for q in qs):
        return None
    return qs


def _union(group: tuple[str, str], nodes: list[onnx.NodeProto],
           consts: dict[str, onnx.TensorProto], producer: dict[str, onnx.NodeProto],
           readers: dict[str, list[onnx.NodeProto]], outputs: set[str],
           taken: set[str]) -> list[onnx.TensorProto] | None:
    """The scale and zero point of one encoding covering the ranges of every Q and DQ in
    `nodes`; None where they have one already, or the group is not one to change."""
    for node in nodes:
        if node.op_type == "QuantizeLinear" and (node.output[0] in outputs or any(
                r.op_type != "DequantizeLinear" for r in readers.get(node.output[0], []))):
            return None  # codes something other than a DQ reads
        if node.op_type == "DequantizeLinear" and (
                node.input[0] in consts or producer.get(node.input[0]) is None):
            return None  # a constant's codes, or a graph input's
    pairs = {(n.input[1], n.input[2]) for n in nodes}
    if any(s not in consts or z not in consts for s, z in pairs):
        return None
    encodings = [(numpy_helper.to_array(consts[s]), numpy_helper.to_array(consts[z]))
                 for s, z in pairs]
    kinds = {z.dtype for _, z in encodings}
    if len(kinds) != 1 or any(s.size != 1 or z.size != 1 for s, z in encodings) or \
            len({(float(s), int(z)) for s, z in encodings}) == 1:
        return None
    info = np.iinfo(kinds.pop())
    lo = min(0.0, *((info.min - int(z)) * float(s) for s, z in encodings))
    hi = max(0.0, *((info.max - int(z)) * float(s) for s, z in encodings))
    scale = np.asarray((hi - lo) / (info.max - info.min), dtype=encodings[0][0].dtype)
    if float(scale) * (info.max - info.min) < hi - lo:  # rounded down to the scale's type
        scale = np.nextafter(scale, np.inf, dtype=scale.dtype)
    zero = np.asarray(np.clip(np.round(info.min - lo / float(scale)), info.min, info.max),
                      dtype=info.dtype)
    base = next(f"{group[0]}/shared{k or ''}" for k in range(len(taken) + 1)
                if f"{group[0]}/shared{k or ''}_scale" not in taken)
    return [numpy_helper.from_array(scale, f"{base}_scale"),
            numpy_helper.from_array(zero, f"{base}_zero_point")]
