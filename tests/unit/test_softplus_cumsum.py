"""Two QNN HTP legalizations the state-space layers of Mamba and its hybrids need: Softplus
composed without a Log of inputs near 1 (HTP has none, and its 16-bit Log there is wrong), and
a float CumSum as a scan of shifted Adds; each within float rounding of ONNX Runtime's CPU."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.cumsum_lowering import lower_cumsums
from executors.onnx.htp_math import softplus_composed
from executors.onnx.htp_rewrites import REWRITES, violations


def _model(node: onnx.NodeProto, dims: list[int], inits: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits or [])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_softplus_is_composed_of_what_htp_runs_and_stays_within_float_rounding():
    model = _model(helper.make_node("Softplus", ["x"], ["y"], name="/mixer/Softplus"), [4, 64])
    # Mamba's step sizes (mostly below 0.01: inputs near -5), both signs, and large magnitudes
    x = np.concatenate([np.linspace(-30, 30, 128), np.linspace(-9, -3, 128)]).astype(
        np.float32).reshape(4, 64)
    want = _run(model, x)
    assert any("Softplus" in v for v in violations(model))
    assert softplus_composed(model) == 1
    ops = [n.op_type for n in model.graph.node]
    assert "Softplus" not in ops and "Log" not in ops and violations(model) == []
    got = _run(model, x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    small = x < -3  # the series keeps small step sizes' relative precision
    np.testing.assert_allclose(got[small], want[small], rtol=1e-5)
    assert ("softplus", softplus_composed) in REWRITES


@pytest.mark.parametrize(("dims", "axis"), [([1, 4, 1, 256], -1), ([1, 4, 1, 7, 5], -2),
                                            ([3, 5, 2], 0), ([4, 6], 1), ([2, 1], 1)])
def test_a_float_cumsum_is_a_scan_of_shifted_adds(dims, axis):
    rng = np.random.default_rng(0)
    for exclusive, reverse in itertools.product((0, 1), (0, 1)):
        model = _model(helper.make_node("CumSum", ["x", "axis"], ["y"], name="/m/CumSum",
                                        exclusive=exclusive, reverse=reverse),
                       dims, [numpy_helper.from_array(np.array(axis, np.int64), "axis")])
        x = rng.standard_normal(dims).astype(np.float32)
        want = _run(model, x)
        assert lower_cumsums(model) == 1
        assert "CumSum" not in [n.op_type for n in model.graph.node]
        got = _run(model, x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-5)


def test_an_integer_cumsum_is_left_alone():
    graph = helper.make_graph(
        [helper.make_node("CumSum", ["x", "axis"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array(1, np.int64), "axis")])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert lower_cumsums(model) == 0


def test_a_float_cumsum_over_a_free_axis_is_left_and_named():
    model = _model(helper.make_node("CumSum", ["x", "axis"], ["y"], name="/m/CumSum"),
                   ["n", 3], [numpy_helper.from_array(np.array(0, np.int64), "axis")])
    assert lower_cumsums(model) == 0
    (left,) = violations(model)
    assert left.startswith("float CumSum '/m/CumSum'")
    from executors.onnx.htp_rewrites import remedy

    assert "export with fixed shapes" in remedy(model)
