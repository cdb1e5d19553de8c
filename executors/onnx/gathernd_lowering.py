"""A GatherND whose indices are constant, as a Reshape and a Gather: the QNN EP's HTP builder
declines GatherND in the form torch.export makes of a mask's advanced indexing (`mask[b, kv]`
over index grids: the boolean attention mask of GLM-4's and Cohere 2's graphs exported with
`export=dynamo`, measured with onnxruntime-qnn 2.7.0).

Exactly, on static shapes: with `batch_dims` 0, indices [..., k] address the first k axes of
data [d0, ..., d(k-1), rest...]; each index tuple is one row of data reshaped to
[d0 * ... * d(k-1), rest...], the row sum(i_j * stride_j) (negative indices counted from the
end, as GatherND counts them), so a Gather on axis 0 by those rows gives the same
[..., rest...] output.
"""

from __future__ import annotations

import numpy as np
import onnx

from executors.onnx.graph_edit import (
    Emitter,
    drop_unread_initializers,
    replace,
    with_constant_second,
)


def rows(indices: np.ndarray, dims: list[int]) -> np.ndarray:
    """The row of data flattened over its first k axes that each index tuple addresses."""
    k = indices.shape[-1]
    lead = np.asarray(dims[:k], np.int64)
    wrapped = np.where(indices < 0, indices + lead, indices).astype(np.int64)
    if np.any(wrapped < 0) or np.any(wrapped >= lead):
        raise ValueError("an index is out of its axis' range")
    strides = np.cumprod(np.concatenate([lead[1:], [1]])[::-1])[::-1]
    return (wrapped * strides).sum(axis=-1)


def lower_gathernds(model: onnx.ModelProto) -> int:
    """Every GatherND with constant indices, batch_dims 0 and static data -> Reshape, Gather."""
    consts, found, known = with_constant_second(model, "GatherND")
    count = 0
    for node in found:
        if any(a.name == "batch_dims" and a.i for a in node.attribute):
            continue
        dims = known.get(node.input[0])
        indices = np.asarray(consts[node.input[1]])
        if not dims or None in dims or indices.ndim < 1 or indices.shape[-1] > len(dims):
            continue
        try:
            flat = rows(indices, dims)
        except ValueError:
            continue  # ONNX Runtime reports it as the export's error, not this rewrite's
        k = indices.shape[-1]
        e = Emitter(model, node.name or node.output[0])  # names unique to the node
        table = e.reshape(node.input[0], [int(np.prod(dims[:k])), *dims[k:]])
        e.node("Gather", [table, e.const(flat, "rows")], node.output[0], axis=0)
        replace(model, node, e.nodes)
        drop_unread_initializers(model, list(node.input))  # constant data: its reshaped copy
        count += 1
    return count
