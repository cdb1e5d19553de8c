"""A tied head reads the embedding table through a Transpose, its transposed copy dropped; a
weight that differs from the table in one value is left alone; the outputs stay the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.tied_head import tie, tie_file


def lm(table: np.ndarray, head: np.ndarray) -> onnx.ModelProto:
    vocab = table.shape[0]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["h"], name="embed"),
             helper.make_node("MatMul", ["h", "head"], ["logits"], name="lm_head")]
    graph = helper.make_graph(
        nodes, "lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3, vocab])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(head, "head")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def logits(model: onnx.ModelProto) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"ids": np.array([[0, 5, 9]], dtype=np.int64)})[0]


def test_a_tied_head_reads_the_table_and_computes_the_same(tmp_path: Path) -> None:
    table = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    model = lm(table, table.T.copy())
    before = logits(model)
    assert tie(model, tmp_path) == ["head"]
    assert [i.name for i in model.graph.initializer] == ["table"]
    assert [n.op_type for n in model.graph.node] == ["Gather", "Transpose", "MatMul"]
    np.testing.assert_array_equal(logits(model), before)


def test_a_head_that_differs_in_one_value_is_not_tied(tmp_path: Path) -> None:
    table = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)
    head = table.T.copy()
    head[2, 7] += 1e-3
    model = lm(table, head)
    assert tie(model, tmp_path) == []
    assert {i.name for i in model.graph.initializer} == {"table", "head"}


def test_a_tied_file_is_rewritten_not_written_through_its_link(tmp_path: Path) -> None:
    table = np.random.default_rng(2).standard_normal((10, 4)).astype(np.float32)
    entry = tmp_path / "entry.onnx"
    onnx.save(lm(table, table.T.copy()), str(entry))
    published = tmp_path / "published.onnx"
    published.hardlink_to(entry)
    assert tie_file(published, tmp_path) == set()  # both weights inline: no file to drop
    assert len(onnx.load(str(entry)).graph.initializer) == 2  # the store's entry untouched
    assert len(onnx.load(str(published)).graph.initializer) == 1
