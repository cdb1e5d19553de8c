"""A Mul over a non-scalar constant takes the constant first for HTP: exact on the CPU, applied
once, and only where one operand is a constant of more than one value."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_rewrites import REWRITES, constant_first_muls

SHAPE = [1, 8, 3, 3]


def _model(first: str, second: str, scale: np.ndarray, as_node: bool = False) -> onnx.ModelProto:
    """y = Mul(first, second) over the input x, the activation h = Relu(x) and the constant c."""
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="/act")]
    inits = []
    if as_node:
        nodes.append(helper.make_node("Constant", [], ["c"], name="/c",
                                      value=numpy_helper.from_array(scale, "c")))
    else:
        inits.append(numpy_helper.from_array(scale, "c"))
    nodes.append(helper.make_node("Mul", [first, second], ["y"], name="/norm/Mul"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, SHAPE)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _scale() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((8, 1, 1)).astype(np.float32)


def test_per_channel_scale_moves_first_and_stays_exact():
    for as_node in (False, True):
        model = _model("h", "c", _scale(), as_node)
        x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
        want = _run(model, x)
        assert constant_first_muls(model) == 1
        assert list(model.graph.node[-1].input) == ["c", "h"]
        np.testing.assert_array_equal(_run(model, x), want)
        assert constant_first_muls(model) == 0  # idempotent


def test_scalars_constant_first_and_two_activations_are_kept():
    kept = [_model("h", "c", np.array(0.5, np.float32)),
            _model("h", "c", np.ones((1, 1, 1), np.float32)),
            _model("c", "h", _scale()),
            _model("h", "x", _scale())]
    for model in kept:
        before = [list(n.input) for n in model.graph.node]
        assert constant_first_muls(model) == 0
        assert [list(n.input) for n in model.graph.node] == before


def test_rewrite_runs_in_the_htp_legalizer():
    assert ("constant_first_muls", constant_first_muls) in REWRITES


def test_a_mul_by_ones_that_widens_nothing_becomes_an_identity() -> None:
    from executors.onnx.htp_rewrites import unit_muls

    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    ones = np.ones([1, 1, 1, 3], np.float32)  # an untrained norm's weight, broadcast in
    model = onnx.shape_inference.infer_shapes(_model("c", "h", ones))
    want = _run(model, x)
    assert unit_muls(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Relu", "Identity"]
    assert not model.graph.initializer  # the ones went with it
    np.testing.assert_array_equal(_run(model, x), want)
    assert ("unit_muls", unit_muls) in REWRITES
    # not where the ones widen the output, nor for a constant of other values
    for scale in (np.ones([2, 8, 3, 3], np.float32), np.full([1, 1, 1, 3], 2.0, np.float32)):
        other = onnx.shape_inference.infer_shapes(_model("c", "h", scale))
        assert unit_muls(other) == 0
