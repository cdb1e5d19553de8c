"""ReduceLogSumExp, which HTP lacks, composed about its maximum (legalize's `logsumexp`
rewrite): the same values as ONNX Runtime's own operator, at opset 17 (axes an attribute) and
18 (axes an input), kept or dropped, over all axes; large inputs do not overflow; no
ReduceLogSumExp is left."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import htp_math


def graph(opset: int, axes: list[int] | None, keepdims: int,
          op: str = "ReduceLogSumExp") -> onnx.ModelProto:
    """One `op` reducing a [2, 3, 5] input over `axes` (all where None)."""
    inputs, inits, attrs = ["x"], [], {"keepdims": keepdims}
    if axes is not None and opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        inputs.append("axes")
    elif axes is not None:
        attrs["axes"] = axes
    node = helper.make_node(op, inputs, ["y"], name="/gate/reduce", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [2, 3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         out_shape(axes, keepdims))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def out_shape(axes: list[int] | None, keepdims: int) -> list[int]:
    reduced = np.zeros((2, 3, 5)).sum(axis=None if axes is None else tuple(axes),
                                      keepdims=bool(keepdims))
    return list(np.shape(reduced))


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize(("axes", "keepdims"), [([-1], 1), ([-1], 0), ([0, 2], 0),
                                                 (None, 1), (None, 0)])
def test_logsumexp_composed_gives_what_the_operator_does(opset: int, axes: list[int] | None,
                                                        keepdims: int) -> None:
    x = np.random.default_rng(0).normal(scale=4.0, size=(2, 3, 5)).astype(np.float32)
    x[0, 0, 0] = 90.0  # exp(90) overflows float32: the composition subtracts the maximum
    model = graph(opset, axes, keepdims)
    want = run(model, x)
    assert htp_math.logsumexps_composed(model) == 1
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert "ReduceLogSumExp" not in {n.op_type for n in model.graph.node}
    got = run(model, x)
    assert got.shape == want.shape and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_logsumexp_that_reduces_nothing_is_left() -> None:
    model = graph(18, None, 1)
    model.graph.node[0].attribute.append(helper.make_attribute("noop_with_empty_axes", 1))
    assert htp_math.logsumexps_composed(model) == 0
    assert [n.op_type for n in model.graph.node] == ["ReduceLogSumExp"]


@pytest.mark.parametrize("shared", [False, True])
def test_log_sigmoid_composed_without_a_log(shared: bool) -> None:
    """Log(Sigmoid(x)) -> -Softplus(-x) in its Log-free form: torch's logsigmoid to within
    2e-6 over a wide range of x; the Sigmoid stays only where something else reads it."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="/gate/Sigmoid"),
             helper.make_node("Log", ["s"], ["y"], name="/gate/Log")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])]
    if shared:
        outputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [64]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [64])], outputs)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.linspace(-30.0, 30.0, 64, dtype=np.float32)
    assert htp_math.log_sigmoids_composed(model) == 1
    onnx.checker.check_model(model)
    ops = [n.op_type for n in model.graph.node]
    assert "Log" not in ops and ("Sigmoid" in ops) == shared
    got = run(model, x)
    want = -np.logaddexp(0.0, -x.astype(np.float64))  # log(sigmoid(x)), exactly
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
