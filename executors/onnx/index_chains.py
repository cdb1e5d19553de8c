"""A chain of pure data-movement nodes (Gathers with constant indices, Transposes, Reshapes,
Squeezes, Unsqueezes) that carries a tensor of rank > 5 and holds a Gather, as one Gather over
a flattened axis: torch exports F.unfold (im2col) that way, and QNN HTP declined its rank-6
Gather, Transpose and Reshape (measured on MobileViTV2's unfolding; rank-5 tensors compiled).

The chain is a fixed permutation or selection of its input's elements on static shapes, so it
is computed once, on an index tensor, and replaced exactly: Reshape the input to
[leading, rest] (the leading axes the chain leaves in place), Gather the rest, Reshape to the
output.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from executors.onnx import graph_edit
from executors.onnx.graph_edit import (
    Emitter,
    constants,
    drop_unread_initializers,
    replace,
    static_shapes,
)

MOVES = ("Gather", "Transpose", "Reshape", "Squeeze", "Unsqueeze")
MAX_RANK = 5


def _apply(node: onnx.NodeProto, x: np.ndarray, consts: dict[str, np.ndarray]) -> np.ndarray:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    second = consts.get(node.input[1]) if len(node.input) > 1 else None
    if node.op_type == "Gather":
        return np.take(x, np.where(second < 0, second + x.shape[attrs.get("axis", 0)], second),
                       axis=attrs.get("axis", 0))
    if node.op_type == "Transpose":
        return x.transpose(attrs.get("perm", list(range(x.ndim))[::-1]))
    if node.op_type == "Reshape":
        shape = [x.shape[i] if d == 0 and not attrs.get("allowzero", 0) else int(d)
                 for i, d in enumerate(second)]
        return x.reshape(shape)
    axes = [int(a) for a in (second if second is not None else attrs.get("axes", []))]
    if node.op_type == "Squeeze":
        return np.squeeze(x, axis=tuple(axes)) if axes else np.squeeze(x)
    out = x
    for a in sorted(a % (x.ndim + len(axes)) for a in axes):
        out = np.expand_dims(out, a)
    return out


def _movable(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> bool:
    return node.op_type in MOVES and node.input[0] not in consts \
        and all(i in consts for i in node.input[1:] if i)


def _chain(model: onnx.ModelProto, start: onnx.NodeProto, known: dict,
           consts: dict) -> list[onnx.NodeProto]:
    """The movement nodes around `start` (whose output has rank > MAX_RANK) while a tensor
    between them has rank > MAX_RANK and feeds only the next one."""
    producer = {o: n for n in model.graph.node for o in n.output}
    readers = graph_edit.readers(model)
    outputs = {o.name for o in model.graph.output}
    chain = [start]
    while len(known.get(chain[0].input[0]) or []) > MAX_RANK:
        prev = producer.get(chain[0].input[0])
        if prev is None or not _movable(prev, consts) or len(readers[prev.output[0]]) != 1:
            break
        chain.insert(0, prev)
    while len(known.get(chain[-1].output[0]) or []) > MAX_RANK:
        nxt = readers.get(chain[-1].output[0], [])
        if len(nxt) != 1 or chain[-1].output[0] in outputs or not _movable(nxt[0], consts):
            return []
        chain.append(nxt[0])
    return chain


def _lower(model: onnx.ModelProto, chain: list[onnx.NodeProto], in_shape: list[int],
           consts: dict[str, np.ndarray]) -> None:
    index = np.arange(int(np.prod(in_shape))).reshape(in_shape)
    for node in chain:
        index = _apply(node, index, consts)
    out_shape = list(index.shape)
    total = int(np.prod(in_shape))
    lead = 0  # leading axes the chain leaves in place: gather only the rest, row by row
    while lead < min(len(in_shape), len(out_shape)) - 1 and in_shape[lead] == out_shape[lead]:
        rows = int(np.prod(in_shape[:lead + 1]))
        flat = index.reshape(rows, -1)
        if not np.array_equal(flat - np.arange(rows)[:, None] * (total // rows),
                              np.broadcast_to(flat[0], flat.shape)):
            break
        lead += 1
    rows = int(np.prod(in_shape[:lead]))
    width = total // rows
    picks = index.reshape(rows, -1)[0].astype(np.int64)
    em = Emitter(model, chain[0].name or chain[0].output[0])
    x = em.reshape(chain[0].input[0], [rows, width])
    gathered = em.node("Gather", [x, em.const(picks, "indices")], axis=1)
    em.reshape(gathered, out_shape, chain[-1].output[0])
    for node in chain[1:]:
        model.graph.node.remove(node)
    replace(model, chain[0], em.nodes)
    drop_unread_initializers(model, [i for n in chain for i in n.input[1:]])
    gone = {n.output[0] for n in chain[:-1]}
    for info in [v for v in model.graph.value_info if v.name in gone]:
        model.graph.value_info.remove(info)


def fold_index_chains(model: onnx.ModelProto) -> int:
    """Every movement chain through a tensor of rank > 5 that holds a Gather -> one Gather."""
    consts = constants(model)
    starts = [n for n in model.graph.node if _movable(n, consts)]
    if not starts:
        return 0
    known = static_shapes(model, [n.output[0] for n in starts])
    count = 0
    for start in starts:
        if start not in model.graph.node or len(known.get(start.output[0]) or []) <= MAX_RANK:
            continue
        chain = _chain(model, start, known, consts)
        in_shape = known.get(chain[0].input[0]) if chain else None
        if not chain or not any(n.op_type == "Gather" for n in chain) or not in_shape \
                or None in in_shape:
            continue
        _lower(model, chain, in_shape, consts)
        count += 1
    return count
