"""An outer product written as a broadcast Mul (the delta rule's state update in Qwen3.5's
decode graph: k[..., :, None] * delta[..., None, :]) is a MatMul on HTP, which computed what
followed the Mul wrongly: exact on the CPU, and only that form is rewritten."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_math import outer_products_as_matmuls


def _mul(a_shape: list[int], b_shape: list[int], constant_b: bool = False) -> onnx.ModelProto:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)
    inputs, inits = [a], []
    if constant_b:
        inits.append(numpy_helper.from_array(np.full(b_shape, 0.5, np.float32), "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape))
    mul = helper.make_node("Mul", ["a", "b"], ["m"], name="/layer/Mul")
    add = helper.make_node("Add", ["m", "m"], ["y"], name="/layer/Add")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([mul, add], "g", inputs, [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("a_shape, b_shape", [
    ([1, 4, 8, 1], [1, 4, 1, 6]),  # column times row
    ([1, 4, 1, 6], [1, 4, 8, 1]),  # row times column: the MatMul takes them the other way
    ([2, 8, 1], [1, 1, 6]),        # batch dims broadcast as a MatMul's do
])
def test_a_broadcast_outer_product_becomes_an_exact_matmul(a_shape: list[int],
                                                            b_shape: list[int]) -> None:
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32),
             "b": rng.standard_normal(b_shape).astype(np.float32)}
    model = _mul(a_shape, b_shape)
    want = _run(model, feeds)
    assert outer_products_as_matmuls(model) == 1
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Add"]
    np.testing.assert_array_equal(_run(model, feeds), want)


@pytest.mark.parametrize("a_shape, b_shape, constant_b", [
    ([1, 4, 8, 6], [1, 1, 1, 6], False),  # a scale broadcast over rows: not an outer product
    ([1, 4, 8, 1], [1, 4, 1, 1], False),  # one column: n is 1
    ([1, 4, 8, 1], [1, 4, 1, 6], True),   # a constant factor: a weight, quantized as one
    ([4, 8, 1], [1, 4, 1, 6], False),     # ranks differ
])
def test_other_muls_are_left(a_shape: list[int], b_shape: list[int], constant_b: bool) -> None:
    model = _mul(a_shape, b_shape, constant_b)
    assert outer_products_as_matmuls(model) == 0
    assert [n.op_type for n in model.graph.node] == ["Mul", "Add"]


def test_an_integer_outer_product_is_left() -> None:
    """DeBERTa's mask times its transpose: HTP has no integer MatMul."""
    a = helper.make_tensor_value_info("a", TensorProto.INT64, [1, 1, 8, 1])
    b = helper.make_tensor_value_info("b", TensorProto.INT64, [1, 1, 1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    graph = helper.make_graph([helper.make_node("Mul", ["a", "b"], ["y"])], "g", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert outer_products_as_matmuls(model) == 0
