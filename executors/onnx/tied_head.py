"""A tied head read from the embedding table itself. A checkpoint whose output projection is
its input embedding (`tie_word_embeddings`) exports as a Gather on the table [vocab, hidden]
and a MatMul on a constant-folded transposed copy [hidden, vocab]: the same bytes twice, the
largest tensor of a language model. `tie` finds each MatMul whose weight is exactly the
transpose of a Gather's table and makes it read the table through a Transpose node, so the
graph file names the table once (an ONNX Runtime session folds the Transpose when it loads).

Only float weights are tied: a quantized head and table carry their own scales, and an
EPContext graph holds no weights of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from executors.onnx.artifacts import load
from executors.store import weights

FLOATS = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
          onnx.TensorProto.DOUBLE: np.float64}


def tie(model: onnx.ModelProto, base: Path) -> list[str]:
    """Rewrite every MatMul of `model` (saved in `base`) whose weight is the transpose of a
    Gather's table to read that table; the names of the weights dropped."""
    inits = {i.name: i for i in model.graph.initializer}
    tables = {n.input[0]: inits[n.input[0]] for n in model.graph.node
              if n.op_type == "Gather" and n.input[0] in inits
              and len(inits[n.input[0]].dims) == 2 and inits[n.input[0]].data_type in FLOATS}
    if not tables:
        return []
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    dropped: list[str] = []
    transposed: dict[str, str] = {}
    for node in list(model.graph.node):
        if node.op_type != "MatMul" or node.input[1] not in inits or node.input[1] in tables:
            continue
        weight = inits[node.input[1]]
        table = next((t for t in tables.values() if _is_transpose(weight, t, base)), None)
        if table is None:
            continue
        if table.name not in transposed:
            transposed[table.name] = f"{table.name}/transposed"
            at = list(model.graph.node).index(node)
            model.graph.node.insert(at, helper.make_node(
                "Transpose", [table.name], [transposed[table.name]], perm=[1, 0],
                name=f"{node.name or table.name}/tied_table"))
        node.input[1] = transposed[table.name]
        readers[weight.name] -= 1
        if readers[weight.name] == 0 and weight.name not in {o.name for o in model.graph.output}:
            model.graph.initializer.remove(weight)
            dropped.append(weight.name)
    return dropped


def _is_transpose(weight: onnx.TensorProto, table: onnx.TensorProto, base: Path) -> bool:
    if weight.data_type != table.data_type or list(weight.dims) != list(table.dims)[::-1]:
        return False
    w, t = _array(weight, base), _array(table, base)
    if w is None or t is None:
        return False
    rows = np.linspace(0, t.shape[0] - 1, num=min(8, t.shape[0]), dtype=np.int64)
    if not np.array_equal(w[:, rows], t[rows].T):  # a few columns first: most pairs differ
        return False
    step = max(1, (1 << 24) // max(1, t.shape[1] * t.itemsize))
    return all(np.array_equal(w[:, i:i + step], t[i:i + step].T)
               for i in range(0, t.shape[0], step))


def _array(tensor: onnx.TensorProto, base: Path) -> np.ndarray | None:
    """The tensor's values without reading a weight file whole (a view of its mapped bytes)."""
    dtype = np.dtype(FLOATS[tensor.data_type])
    shape = tuple(tensor.dims)
    if tensor.data_location == weights.EXTERNAL:
        path, offset = weights.data_file(tensor, base)
        if not path.is_file() or path.stat().st_size < offset + dtype.itemsize * int(np.prod(shape)):
            return None
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
    if tensor.raw_data:
        return np.frombuffer(tensor.raw_data, dtype=dtype).reshape(shape)
    return numpy_helper.to_array(tensor)


def tie_file(path: Path, base: Path) -> set[str]:
    """Tie the head of the graph file at `path` (its weights in `base`), writing a new file
    in its place (never through a hard link to a store entry); the files of the weights it
    no longer reads (relative to its folder)."""
    model = load(path, external=False)
    before = _files(model)
    if not tie(model, base):
        return set()
    path.unlink()
    onnx.save_model(model, str(path))
    return before - _files(model)


def _files(model: onnx.ModelProto) -> set[str]:
    return {e.value for t in weights.tensors(model) if t.data_location == weights.EXTERNAL
            for e in t.external_data if e.key == "location"}
