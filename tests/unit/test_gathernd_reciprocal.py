"""Two QNN HTP legalizations that torch.export's LLM graphs need: a GatherND on constant indices
(the boolean mask's advanced indexing) as a Reshape and a Gather, and Reciprocal (its RMSNorm's
rsqrt) as a Div; each exact on ONNX Runtime's CPU."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import htp_ops
from executors.onnx.gathernd_lowering import lower_gathernds
from executors.onnx.htp_math import reciprocals_as_divs
from executors.onnx.htp_rewrites import REWRITES, violations


def _model(nodes: list[onnx.NodeProto], x: tuple[int, list[int]], inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x[0], x[1])],
                              [helper.make_tensor_value_info("y", x[0], None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(model)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize(("dims", "indices"), [
    # torch.export's mask[batch, kv]: [1, 1, 1, 40, 2] index grids into a [1, 40] bool mask
    ([1, 40], np.stack([np.zeros(40, np.int64), np.arange(40)], -1).reshape(1, 1, 1, 40, 2)),
    # fewer index columns than axes (whole rows gathered), negative indices, repeats
    ([3, 4, 5], np.array([[[0, -1], [2, 1]], [[-3, 3], [0, -1]]], np.int64)),
    ([3, 4, 5], np.array([[2], [0], [-1], [2]], np.int64)),
])
def test_gathernd_on_constant_indices_is_a_reshape_and_a_gather(dims, indices):
    elem = TensorProto.BOOL if dims == [1, 40] else TensorProto.FLOAT
    model = _model([helper.make_node("GatherND", ["x", "idx"], ["y"], name="/m/GatherND_2")],
                   (elem, dims), [numpy_helper.from_array(indices, "idx")])
    rng = np.random.default_rng(0)
    x = rng.random(dims) > 0.5 if elem == TensorProto.BOOL else \
        rng.standard_normal(dims).astype(np.float32)
    want = _run(model, x)
    assert lower_gathernds(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Reshape", "Gather"]
    assert "idx" not in {i.name for i in model.graph.initializer}  # the indices went with it
    got = _run(model, x)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_two_gathernds_in_one_scope_and_one_on_constant_data():
    # each lowering's names are its node's own: two in one name scope must not collide
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    nodes = [helper.make_node("GatherND", ["x", "i1"], ["a"], name="/m/GatherND_2"),
             helper.make_node("GatherND", ["x", "i2"], ["b"], name="/m/GatherND_3"),
             helper.make_node("GatherND", ["table", "i3"], ["c"], name="/m/GatherND_4"),
             helper.make_node("Add", ["a", "b"], ["ab"]),
             helper.make_node("Add", ["ab", "c"], ["y"])]
    model = _model(nodes, (TensorProto.FLOAT, [2, 3, 4]), [
        numpy_helper.from_array(np.array([[1, 2], [0, -1]], np.int64), "i1"),
        numpy_helper.from_array(np.array([[0, 0], [1, 1]], np.int64), "i2"),
        numpy_helper.from_array(np.array([[-1, 2]], np.int64).repeat(2, 0), "i3"),
        numpy_helper.from_array(data, "table")])
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    want = _run(model, x)
    assert lower_gathernds(model) == 3
    onnx.checker.check_model(model)  # unique names, every input defined
    assert {i.name for i in model.graph.initializer} & {"i1", "i2", "i3", "table"} == set()
    np.testing.assert_array_equal(_run(model, x), want)


def test_gathernd_of_rank_one_indices_and_every_axis_indexed():
    for indices, dims in ((np.array([1], np.int64), [3, 4]),
                          (np.array([[2, 0, 1], [0, 3, 4]], np.int64), [3, 4, 5])):
        model = _model([helper.make_node("GatherND", ["x", "idx"], ["y"], name="/g")],
                       (TensorProto.FLOAT, dims), [numpy_helper.from_array(indices, "idx")])
        x = np.random.default_rng(3).standard_normal(dims).astype(np.float32)
        want = _run(model, x)
        assert lower_gathernds(model) == 1
        got = _run(model, x)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_gathernd_left_alone_where_it_cannot_be_lowered_exactly():
    batch = _model([helper.make_node("GatherND", ["x", "idx"], ["y"], batch_dims=1)],
                   (TensorProto.FLOAT, [2, 3]), [numpy_helper.from_array(
                       np.array([[1], [2]], np.int64), "idx")])
    free = _model([helper.make_node("GatherND", ["x", "idx"], ["y"])],
                  (TensorProto.FLOAT, ["n", 3]), [numpy_helper.from_array(
                      np.array([[0, 1]], np.int64), "idx")])
    graph = helper.make_graph(  # indices computed in the graph
        [helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
         helper.make_node("GatherND", ["x", "i"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    dynamic = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    for model in (batch, free, dynamic):
        assert lower_gathernds(model) == 0
        assert "GatherND" in [n.op_type for n in model.graph.node]


def test_reciprocal_becomes_a_div_of_one_and_htp_declines_what_is_left():
    model = _model([helper.make_node("Sqrt", ["x"], ["s"]),
                    helper.make_node("Reciprocal", ["s"], ["y"], name="/norm/Reciprocal_15")],
                   (TensorProto.FLOAT, [2, 8, 1]), [])
    x = np.random.default_rng(1).uniform(1e-4, 1e-2, (2, 8, 1)).astype(np.float32)
    want = _run(model, x)
    assert htp_ops.lacks("Reciprocal")
    assert any("Reciprocal" in v for v in violations(model))
    assert reciprocals_as_divs(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Sqrt", "Div"]
    assert violations(model) == []
    np.testing.assert_array_equal(_run(model, x), want)
    assert ("reciprocals", reciprocals_as_divs) in REWRITES
    assert ("gathernd", lower_gathernds) in REWRITES
