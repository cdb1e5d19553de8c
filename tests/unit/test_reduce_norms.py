"""The norms HTP lacks or gets wrong, written with the ops it takes (legalize's `reduce_l2`
rewrite): ReduceL2 as Sqrt(ReduceSum(x * x)), ReduceL1 (DBRX's router) as ReduceSum(Abs(x)),
ReduceSumSquare as ReduceSum(x * x); the same values as ONNX Runtime's own operators, at
opset 17 (axes an attribute) and 18 (axes an input), kept or dropped, over all axes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_rewrites import NORMS, decompose_reduce_l2

SHAPE = (2, 3, 5)


def graph(op: str, opset: int, axes: list[int] | None, keepdims: int) -> onnx.ModelProto:
    inputs, inits, attrs = ["x"], [], {"keepdims": keepdims}
    if axes is not None and opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        inputs.append("axes")
    elif axes is not None:
        attrs["axes"] = axes
    node = helper.make_node(op, inputs, ["y"], name="/router/norm", **attrs)
    reduced = np.zeros(SHAPE).sum(axis=None if axes is None else tuple(axes),
                                  keepdims=bool(keepdims))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      list(SHAPE))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         list(np.shape(reduced)))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]


@pytest.mark.parametrize("op", sorted(NORMS))
@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize(("axes", "keepdims"), [([-1], 1), ([0, 2], 0), (None, 1)])
def test_a_norm_is_written_with_ops_htp_takes(op: str, opset: int, axes: list[int] | None,
                                              keepdims: int) -> None:
    x = np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)
    model = graph(op, opset, axes, keepdims)
    want = run(model, x)
    assert decompose_reduce_l2(model) == 1
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    left = {n.op_type for n in model.graph.node}
    assert not left & set(NORMS) and "ReduceSum" in left
    got = run(model, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
