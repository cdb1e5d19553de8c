"""Encodings the QNN EP's HTP backend requires equal, made equal in a QDQ graph after the
quantizer: a Gather's output carries its data input's scale and zero point. ONNX Runtime's
quantizer calibrates the output of a Gather over an activation on the output's own range, and
where both ranges are near zero (an untrained model's convolution state: Zamba's Mamba state
within 1e-4) it floors both scales to one value while their zero points differ, which HTP
declines (measured, onnxruntime-qnn 2.7.0: "has incorrect Value -1835, expected equal to
-1361"; CPU fallback off, the compile fails; with scales that differ it compiles). A Gather
selects values of its data, so the data's encoding represents its output exactly, and reading
it that way loses nothing.
"""

from __future__ import annotations

import onnx

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
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
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
