"""An RMSNorm as one node for HTP: x / Sqrt(ReduceMean(x * x) + eps) over the last axis, and
the constant gain that follows it, becomes ONNX Runtime's SimplifiedLayerNormalization (an op
of ONNX's own domain in ONNX Runtime; the QNN EP builds it as QNN's RmsNorm, which HTP computes
inside the op from its 16-bit input).

Composed, quantization rounds each intermediate to 16 bits over the range calibration saw:
x * x, its mean, the root and its reciprocal. A trained language model carries massive
activations (values in the thousands in a channel of its first token), and then x * x and its
mean span millions, and an ordinary token's mean rounds to a few steps of that range: with one
value of 3000, the ordinary tokens' normed values came out at 7.9 dB composed and 32.1 dB fused
(uint16 QDQ, tests/unit/test_rms_norms.py). One node rounds only its output, and is one node on
the device, not six.

ONNX's checker and shape inference do not know the op: `register()` declares it to onnx in the
process that checks or converts a graph holding it (its schema as ONNX Runtime defines it), and
the fused node's output keeps the value_info the replaced output had.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from executors.onnx.graph_edit import (
    attr,
    constants,
    drop_unread_initializers,
    static_shapes,
    types_of,
)
from executors.onnx.htp_math import FLOATS

OP = "SimplifiedLayerNormalization"
# The norms fused: those of the hidden states, [batch, sequence, hidden]. A norm per attention
# head ([batch, heads, sequence, head_dim]) fused after the rotary embedding came out wrong on
# the HTP simulator inside the attention block (Hunyuan-MoE's query norm: cosine -0.12 against
# the QDQ graph on the CPU), though right alone; Qwen3's, before the rotary embedding, was right.
FUSED_RANK = 3
SCHEMA_FLOATS = ("tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)")


_REGISTERING = threading.Lock()  # steps of two jobs run side by side in one process's threads


def register() -> None:
    """Declare ONNX Runtime's SimplifiedLayerNormalization to onnx (domain "", version 1), once
    per process, so onnx.checker and shape inference accept a graph holding it. Under a lock:
    two threads that both found it missing would both register it, and onnx refuses the second
    ("already registered"; a sweep's two jobs tagged at once)."""
    from onnx import defs

    with _REGISTERING:
        if defs.has(OP, ""):
            return
        param, attribute = defs.OpSchema.FormalParameter, defs.OpSchema.Attribute
        optional = defs.OpSchema.FormalParameterOption.Optional
        defs.register_schema(defs.OpSchema(
            OP, "", 1, doc="ONNX Runtime's RMS normalization over the axes from `axis` on",
            inputs=[param("X", "T"), param("scale", "V")],
            outputs=[param("Y", "V"), param("inv_std_var", "U", param_option=optional)],
            type_constraints=[("T", SCHEMA_FLOATS, ""),
                              ("U", ("tensor(float)", "tensor(double)"), ""),
                              ("V", SCHEMA_FLOATS, "")],
            attributes=[attribute("axis", helper.make_attribute("axis", -1), ""),
                        attribute("epsilon", helper.make_attribute("epsilon", 1e-5), ""),
                        attribute("stash_type", helper.make_attribute("stash_type", 1), "")]))


@dataclass
class _Norm:
    x: str                        # the normalized tensor
    axis: int                     # the axis its mean is over
    eps: float
    nodes: list[onnx.NodeProto]   # the composed norm, its gain's Mul last where there is one
    gain: np.ndarray | None


def fuse_rms_norms(model: onnx.ModelProto) -> int:
    """Each composed RMSNorm over the last axis (x * x or Pow(x, 2); ReduceMean keeping the
    axis; + eps; Sqrt, then x / root, or x * (1 / root) by Div or Reciprocal; or x times its
    Pow by -0.5), with the Mul by a constant gain of the axis's length that follows it, -> one
    SimplifiedLayerNormalization. A norm whose intermediates something else reads, or whose
    axis length is unknown, stays."""
    register()
    graph = model.graph
    made = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    for out in graph.output:
        readers[out.name].append(out)  # type: ignore[arg-type]  # read: not removable
    consts = constants(model)
    found = [m for m in (_match(s, made, readers, consts) for s in list(graph.node)
                         if s.op_type in ("Sqrt", "Pow")) if m is not None]
    if not found:
        return 0
    known = static_shapes(model, [m.x for m in found])
    types = types_of(model, [m.x for m in found])
    taken = {n.name for n in graph.node} | {i.name for i in graph.initializer}
    fused: dict[str, onnx.NodeProto] = {}  # a norm's output -> the node that now makes it
    gone: set[str] = set()  # the outputs of the composed norms' other nodes
    read: list[str] = []  # what those nodes read: constants that may be left unread
    for norm in found:
        gain = _scale(norm, known.get(norm.x))
        if gain is None or types.get(norm.x) not in FLOATS:
            continue
        last = norm.nodes[-1]
        name = _fresh(f"{last.name.rsplit('/', 1)[0] if '/' in last.name else last.output[0]}"
                      f"/{OP}", taken)
        dtype = helper.tensor_dtype_to_np_dtype(types[norm.x])
        graph.initializer.append(numpy_helper.from_array(gain.astype(dtype), f"{name}/scale"))
        fused[last.output[0]] = helper.make_node(
            OP, [norm.x, f"{name}/scale"], [last.output[0]], name=name, axis=-1,
            epsilon=norm.eps, stash_type=1)
        gone |= {o for n in norm.nodes[:-1] for o in n.output}
        read += [i for n in norm.nodes for i in n.input]
    if fused:  # one rebuild of the node list and of the value_info, each norm in its place
        nodes = [fused.get(n.output[0], n) for n in graph.node
                 if not gone.intersection(n.output)]
        del graph.node[:]
        graph.node.extend(nodes)
        infos = [v for v in graph.value_info if v.name not in gone]
        del graph.value_info[:]
        graph.value_info.extend(infos)
        drop_unread_initializers(model, read)
    return len(fused)


def _fresh(name: str, taken: set[str]) -> str:
    """`name`, or `name_<k>` for the first k that no node or initializer has (two norms written
    inline in one module's forward share its scope); then taken."""
    k, found = 0, name
    while found in taken or f"{found}/scale" in taken:
        k += 1
        found = f"{name}_{k}"
    taken.add(found)
    return found


def _scale(norm: _Norm, shape: list[int | None] | None) -> np.ndarray | None:
    """The fused node's scale: the gain over the last axis (ones where none follows); None
    where the norm is not over the last axis of a [batch, sequence, hidden] tensor (a norm per
    attention head stays composed: see FUSED_RANK) or that axis's length is unknown."""
    if not shape or len(shape) != FUSED_RANK or norm.axis not in (-1, FUSED_RANK - 1):
        return None
    size = shape[-1]
    if norm.gain is None:
        return None if size is None else np.ones(size, np.float32)
    if norm.gain.size == 1 and size is not None:
        return np.full(size, norm.gain[0], np.float32)
    return norm.gain if size is None or norm.gain.shape == (size,) else None


def _match(root: onnx.NodeProto, made: dict[str, onnx.NodeProto],
           readers: dict[str, list], consts) -> _Norm | None:
    """The norm whose root is `root`: a Sqrt of the mean plus eps, or a Pow of it by -0.5
    (Gemma 3n's), or None."""
    def only(name: str) -> onnx.NodeProto | None:
        got = readers.get(name, [])
        return got[0] if len(got) == 1 and isinstance(got[0], onnx.NodeProto) else None

    inverted = root.op_type == "Pow"
    if inverted and not (root.input[1] in consts and np.all(consts[root.input[1]] == -0.5)):
        return None
    add = made.get(root.input[0])
    if add is None or add.op_type != "Add":
        return None
    eps_at = next((i for i, n in enumerate(add.input) if n in consts and
                   consts[n].size == 1), None)
    mean = made.get(add.input[1 - eps_at]) if eps_at is not None else None
    if mean is None or mean.op_type != "ReduceMean" or not attr(mean, "keepdims", 1):
        return None
    axes = attr(mean, "axes", None)
    if axes is None and len(mean.input) > 1 and mean.input[1] in consts:
        axes = consts[mean.input[1]].reshape(-1).tolist()
    square = made.get(mean.input[0])
    if axes is None or len(axes) != 1 or square is None or not _is_square(square, consts):
        return None
    tail = _scaling(square.input[0], root, inverted, only, consts)
    chain = [square, mean, add, root, *tail]
    if not tail or any(only(n.output[0]) is None for n in chain[:-1]):
        return None
    gain, after = _gain(only(chain[-1].output[0]), chain[-1].output[0], consts)
    return _Norm(square.input[0], int(axes[0]), float(consts[add.input[eps_at]].reshape(-1)[0]),
                 chain + ([after] if after is not None else []), gain)


def _scaling(x: str, root: onnx.NodeProto, inverted: bool, only: Any,
             consts) -> list[onnx.NodeProto]:
    """The nodes after the root that scale x by its inverse: x / root; x * (1 / root), by Div
    or Reciprocal; x * root where the root is already inverted ([] where they are not so)."""
    reader = only(root.output[0])
    if reader is None:
        return []
    if not inverted and reader.op_type == "Div" and list(reader.input) == [x, root.output[0]]:
        return [reader]
    inverse = [] if inverted else [reader]
    if not inverted and not (reader.op_type == "Reciprocal" or (
            reader.op_type == "Div" and reader.input[1] == root.output[0]
            and reader.input[0] in consts and np.all(consts[reader.input[0]] == 1))):
        return []
    scaled = reader if inverted else only(reader.output[0])
    if scaled is None or scaled.op_type != "Mul" or \
            sorted(scaled.input) != sorted([x, (inverse or [root])[0].output[0]]):
        return []
    return [*inverse, scaled]


def _is_square(node: onnx.NodeProto, consts) -> bool:
    if node.op_type == "Mul":
        return node.input[0] == node.input[1]
    return node.op_type == "Pow" and node.input[1] in consts and \
        np.all(consts[node.input[1]] == 2)


def _gain(reader: onnx.NodeProto | None, normed: str,
          consts) -> tuple[np.ndarray | None, onnx.NodeProto | None]:
    """The constant gain a Mul that alone reads the normalized tensor applies over its last
    axis, and that Mul (None, None where there is none)."""
    if reader is None or reader.op_type != "Mul":
        return None, None
    other = reader.input[1] if reader.input[0] == normed else reader.input[0]
    if other not in consts:
        return None, None
    value = consts[other]
    if value.ndim == 0 or any(d != 1 for d in value.shape[:-1]):
        return None, None
    return value.reshape(-1).astype(np.float32), reader
