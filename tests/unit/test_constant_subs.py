"""A Sub of a float constant becomes an Add of its negation for HTP
(`htp_math.constant_subs_as_adds`): bit for bit the Sub's values (an expm1, Exp(x) - 1, among
them); a Sub of two computed tensors, of integers, or of a constant minus a tensor stays."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_math import constant_subs_as_adds
from executors.onnx.htp_rewrites import REWRITES


def _graph(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto],
           dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, [2, 5]),
                                           helper.make_tensor_value_info("z", dtype, [2, 5])],
                              [helper.make_tensor_value_info("y", dtype, [2, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def test_a_constant_sub_becomes_the_add_of_its_negation() -> None:
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    row = numpy_helper.from_array(np.linspace(-3, 3, 5).astype(np.float32), "row")
    model = _graph([helper.make_node("Exp", ["x"], ["e"]),
                    helper.make_node("Sub", ["e", "one"], ["expm1"], name="/act/Sub"),
                    helper.make_node("Sub", ["expm1", "row"], ["shifted"], name="/act/Sub_1"),
                    helper.make_node("Add", ["shifted", "z"], ["y"])], [one, row])
    rng = np.random.default_rng(0)
    feed = {"x": rng.normal(size=(2, 5)).astype(np.float32) * 4,
            "z": rng.normal(size=(2, 5)).astype(np.float32)}
    want = _run(model, feed)
    assert constant_subs_as_adds(model) == 2
    assert [n.op_type for n in model.graph.node] == ["Exp", "Add", "Add", "Add"]
    assert {i.name for i in model.graph.initializer} == {"/act/Sub/negated", "/act/Sub_1/negated"}
    onnx.checker.check_model(model, full_check=True)
    np.testing.assert_array_equal(_run(model, feed), want)
    assert constant_subs_as_adds(model) == 0


def test_other_subs_stay() -> None:
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    model = _graph([helper.make_node("Sub", ["x", "z"], ["d"]),         # two computed tensors
                    helper.make_node("Sub", ["one", "d"], ["y"])], [one])  # a constant first
    assert constant_subs_as_adds(model) == 0
    ints = _graph([helper.make_node("Sub", ["x", "k"], ["y"])],
                  [numpy_helper.from_array(np.array(3, np.int64), "k")], TensorProto.INT64)
    assert constant_subs_as_adds(ints) == 0


def test_legalize_applies_it() -> None:
    assert ("constant_subs", constant_subs_as_adds) in REWRITES
