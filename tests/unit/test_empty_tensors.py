"""An empty Concat input (a partial rotary embedding's pass-through slice when the rotary width
is the whole head) is dropped for HTP: exact on the CPU, the empty Slice gone, legal after,
named by the checker before; a Concat of real inputs is left as it is."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import htp_rewrites
from executors.onnx.empty_tensors import drop_empty_concat_inputs, empty_concat_inputs

HEAD = 8


def _rotary_like(rotary: int) -> onnx.ModelProto:
    """y = Concat(Neg(x[..., :rotary]), x[..., rotary:]) over x [1, 2, 3, HEAD]."""
    big = np.iinfo(np.int64).max
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("zero", [0]), ("rot", [rotary]), ("end", [big]), ("axis", [3]))]
    nodes = [helper.make_node("Slice", ["x", "zero", "rot", "axis"], ["x_rot"], name="/rot"),
             helper.make_node("Neg", ["x_rot"], ["x_neg"], name="/neg"),
             helper.make_node("Slice", ["x", "rot", "end", "axis"], ["x_pass"], name="/pass"),
             helper.make_node("Concat", ["x_neg", "x_pass"], ["y"], name="/cat", axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 2, 3, HEAD])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_an_empty_pass_through_is_dropped_exactly() -> None:
    model = _rotary_like(HEAD)
    x = np.random.default_rng(0).standard_normal((1, 2, 3, HEAD)).astype(np.float32)
    want = _run(model, x)
    assert empty_concat_inputs(model) == ["x_pass"]
    assert any("x_pass" in v for v in htp_rewrites.violations(model))
    assert drop_empty_concat_inputs(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Slice", "Neg", "Identity"]
    np.testing.assert_array_equal(_run(model, x), want)
    assert htp_rewrites.violations(model) == []
    assert drop_empty_concat_inputs(model) == 0  # idempotent


def test_a_partial_rotary_concat_is_kept() -> None:
    model = _rotary_like(HEAD // 2)
    before = [(n.op_type, list(n.input)) for n in model.graph.node]
    assert drop_empty_concat_inputs(model) == 0
    assert [(n.op_type, list(n.input)) for n in model.graph.node] == before


def test_legalize_runs_it() -> None:
    assert ("empty_concat_inputs", drop_empty_concat_inputs) in htp_rewrites.REWRITES
