"""A boolean-masked assignment of one vector to whole rows, `x[ids == t] = v` (T5Gemma 2's
token embedding puts its end-of-image embedding in that way), as the exporters write it:
ScatterND(x, Transpose(NonZero(Expand(Unsqueeze(rows, -1), shape(x)))), U), where U is v
repeated once per selected row (dynamo: Reshape(Expand(v, [rows, H]))) or a prefix of v
(TorchScript: Slice(v, 0, count), right for one selected row only). HTP declines NonZero (its
output's size depends on the values) and the ScatterND over it; the assignment is
Where(Unsqueeze(rows, -1), v, x), one node that broadcasts v along the last axis. Exact: the
k-th index NonZero gives (row-major) is element k mod H of its row, which U holds."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from executors.onnx.graph_edit import (
    attr,
    constants,
    drop_dead,
    replace,
    static_shapes,
    types_of,
)


def _scalar_int(consts: dict, name: str) -> int | None:
    value = consts.get(name)
    return int(np.asarray(value).reshape(-1)[0]) if value is not None \
        and np.asarray(value).size == 1 else None


def _row_mask(producer: dict, consts: dict, known: dict, mask: str, rank: int) -> str | None:
    """The boolean `rows` of Expand(Unsqueeze(rows, its new last axis), shape) where the mask
    has `rank` (x's) and rows one less, or None."""
    expand = producer.get(mask)
    if expand is None or expand.op_type != "Expand":
        return None
    unsqueeze = producer.get(expand.input[0])
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze":
        return None
    axes = attr(unsqueeze, "axes", None)
    if axes is None and len(unsqueeze.input) > 1:
        axis = _scalar_int(consts, unsqueeze.input[1])
        axes = None if axis is None else [axis]
    rows = unsqueeze.input[0]
    target = consts.get(expand.input[1])
    if len(known.get(rows) or ()) != rank - 1 or axes not in ([-1], [rank - 1]) \
            or (target is not None and np.asarray(target).size != rank):
        return None
    return rows


def _repeated_vector(producer: dict, consts: dict, updates: str, width: int) -> str | None:
    """The constant vector v of `width` elements that U holds element after element: v itself,
    a prefix of it (Slice(v, 0, n)), or v repeated (Expand(v, [..., width]), then a Reshape
    or none), or None."""
    node = producer.get(updates)
    if node is not None and node.op_type == "Slice":
        given = list(node.input) + [""] * (5 - len(node.input))
        axis = _scalar_int(consts, given[3]) if given[3] else 0
        step = _scalar_int(consts, given[4]) if given[4] else 1
        if _scalar_int(consts, given[1]) != 0 or axis not in (0, -1) or step != 1:
            return None
        name = node.input[0]
    else:
        name = updates
        if node is not None and node.op_type == "Reshape":
            name, node = node.input[0], producer.get(node.input[0])
        if node is not None and node.op_type == "Expand":
            name = node.input[0]
    value = consts.get(name)
    return name if value is not None and np.asarray(value).shape == (width,) else None


def masked_rows_as_wheres(model: onnx.ModelProto) -> int:
    """Every ScatterND that writes one vector over the rows a boolean mask selects becomes a
    Where; the NonZero and what made the repeated vector are dropped once nothing reads them."""
    producer = {o: n for n in model.graph.node for o in n.output}
    consts = constants(model)
    found = [n for n in model.graph.node if n.op_type == "ScatterND"]
    if not found:
        return 0
    known = static_shapes(model, [i for n in found for i in n.input[:1]])
    types = types_of(model, [])
    count = 0
    for node in found:
        if attr(node, "reduction", b"none") not in (b"", b"none"):
            continue
        transpose = producer.get(node.input[1])
        nonzero = producer.get(transpose.input[0]) if transpose is not None \
            and transpose.op_type == "Transpose" else None
        if nonzero is None or nonzero.op_type != "NonZero" \
                or attr(transpose, "perm", None) != [1, 0]:
            continue
        shape = known.get(node.input[0])
        if not shape or shape[-1] is None:
            continue
        rows = _row_mask(producer, consts, known, nonzero.input[0], len(shape))
        vector = _repeated_vector(producer, consts, node.input[2], shape[-1])
        if rows is None or vector is None or types.get(rows) != onnx.TensorProto.BOOL:
            continue
        unsqueeze = producer[producer[nonzero.input[0]].input[0]]
        replace(model, node, [helper.make_node(
            "Where", [unsqueeze.output[0], vector, node.input[0]], list(node.output),
            name=f"{node.name or node.output[0]}/as_Where")])
        count += 1
    if count:
        drop_dead(model)
    return count
