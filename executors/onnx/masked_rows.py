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

from executors.onnx.graph_edit import constants, drop_dead, replace

REPEATS = ("Reshape", "Expand")  # keep the element order, v's row after row


def _scalar_int(consts: dict, name: str) -> int | None:
    value = consts.get(name)
    return int(np.asarray(value).reshape(-1)[0]) if value is not None \
        and np.asarray(value).size == 1 else None


def _row_mask(producer: dict, consts: dict, mask: str) -> str | None:
    """The `rows` input of Expand(Unsqueeze(rows, last axis), shape), or None (the axis given
    as -1, or as the last of a constant target shape's)."""
    expand = producer.get(mask)
    if expand is None or expand.op_type != "Expand":
        return None
    unsqueeze = producer.get(expand.input[0])
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze":
        return None
    axes = next((list(a.ints) for a in unsqueeze.attribute if a.name == "axes"), None)
    if axes is None and len(unsqueeze.input) > 1:
        axis = _scalar_int(consts, unsqueeze.input[1])
        axes = None if axis is None else [axis]
    target = consts.get(expand.input[1])
    last = np.asarray(target).size - 1 if target is not None else -1
    return unsqueeze.input[0] if axes is not None and len(axes) == 1 \
        and axes[0] in (-1, last) else None


def _repeated_vector(producer: dict, consts: dict, updates: str) -> str | None:
    """The constant 1-D vector v whose elements U holds in turn (v repeated, or a prefix of v),
    or None."""
    name, node = updates, producer.get(updates)
    if node is not None and node.op_type == "Slice":
        given = list(node.input) + [""] * (5 - len(node.input))
        axis = _scalar_int(consts, given[3]) if given[3] else 0
        step = _scalar_int(consts, given[4]) if given[4] else 1
        if _scalar_int(consts, given[1]) != 0 or axis not in (0, -1) or step != 1:
            return None
        name = node.input[0]
    else:
        while node is not None and node.op_type in REPEATS:
            name, node = node.input[0], producer.get(node.input[0])
    value = consts.get(name)
    return name if value is not None and np.asarray(value).ndim == 1 else None


def masked_rows_as_wheres(model: onnx.ModelProto) -> int:
    """Every ScatterND that writes one vector over the rows a boolean mask selects becomes a
    Where; the NonZero and what made the repeated vector are dropped once nothing reads them."""
    producer = {o: n for n in model.graph.node for o in n.output}
    consts = constants(model)
    count = 0
    for node in [n for n in model.graph.node if n.op_type == "ScatterND"]:
        if any(a.name == "reduction" and a.s not in (b"", b"none") for a in node.attribute):
            continue
        transpose = producer.get(node.input[1])
        nonzero = producer.get(transpose.input[0]) if transpose is not None \
            and transpose.op_type == "Transpose" else None
        if nonzero is None or nonzero.op_type != "NonZero" or next(
                (list(a.ints) for a in transpose.attribute if a.name == "perm"), None) != [1, 0]:
            continue
        rows, vector = _row_mask(producer, consts, nonzero.input[0]), \
            _repeated_vector(producer, consts, node.input[2])
        if rows is None or vector is None:
            continue
        unsqueeze = producer[producer[nonzero.input[0]].input[0]]
        replace(model, node, [helper.make_node(
            "Where", [unsqueeze.output[0], vector, node.input[0]], list(node.output),
            name=f"{node.name or node.output[0]}/as_Where")])
        count += 1
    if count:
        drop_dead(model)
    return count
