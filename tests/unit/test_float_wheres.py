"""The float Where HTP declines, written as arithmetic (`htp_rewrites.rewrite_float_wheres`):
exactly the Where's values for finite inputs, a score beside a mask value of -1e5 too (the
form b + c * (a - b) rounds the score by -1e5's ulp, 0.0078: Reformer's self mask)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from executors.onnx.htp_rewrites import rewrite_float_wheres


def _where() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Where", ["c", "a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [2, 6]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def test_a_float_where_becomes_exact_arithmetic() -> None:
    rng = np.random.default_rng(0)
    feed = {"c": rng.random((2, 6)) < 0.5,
            "a": rng.normal(size=(2, 6)).astype(np.float32),  # scores
            "b": np.full((2, 6), -1e5, np.float32)}           # a mask value beside them
    feed["b"][1] = rng.normal(size=6) * 1e4                   # and values of any size
    model = _where()
    want = _run(model, feed)
    assert rewrite_float_wheres(model) == 1
    assert "Where" not in {n.op_type for n in model.graph.node}
    onnx.checker.check_model(model, full_check=True)
    np.testing.assert_array_equal(_run(model, feed), want)
