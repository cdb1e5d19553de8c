"""The norms HTP lacks or gets wrong, written with the ops it takes (legalize's `norms`
rewrite): ReduceL2 as Sqrt(ReduceSum(x * x)), ReduceL1 (DBRX's router) as ReduceSum(Abs(x)),
ReduceSumSquare as ReduceSum(x * x); the same values as ONNX Runtime's own operators, at
opset 17 (axes an attribute) and 18 (axes an input), kept or dropped, over all axes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from executors.onnx.htp_math import NORMS, decompose_norms
from tests.unit.test_logsumexp import graph, run


@pytest.mark.parametrize("op", sorted(NORMS))
@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize(("axes", "keepdims"), [([-1], 1), ([0, 2], 0), (None, 1)])
def test_a_norm_is_written_with_ops_htp_takes(op: str, opset: int, axes: list[int] | None,
                                              keepdims: int) -> None:
    x = np.random.default_rng(0).normal(size=(2, 3, 5)).astype(np.float32)
    model = graph(opset, axes, keepdims, op)
    want = run(model, x)
    assert decompose_norms(model) == 1
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    left = {n.op_type for n in model.graph.node}
    assert not left & set(NORMS) and "ReduceSum" in left
    got = run(model, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_norm_that_reduces_nothing_is_left() -> None:
    model = graph(18, None, 1, "ReduceL1")
    model.graph.node[0].attribute.append(onnx.helper.make_attribute("noop_with_empty_axes", 1))
    assert decompose_norms(model) == 0
    assert [n.op_type for n in model.graph.node] == ["ReduceL1"]
