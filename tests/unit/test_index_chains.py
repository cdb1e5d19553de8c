"""A data-movement chain through a rank-6 tensor (torch's F.unfold export: two Gathers, a
Transpose, a Reshape) folded into one Gather over a flattened axis, exactly."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.index_chains import fold_index_chains


def _unfold_graph(with_gather: bool = True) -> onnx.ModelProto:
    idx = np.array([[0, 2, 4, 6], [1, 3, 5, 7]], np.int64)
    if with_gather:
        nodes = [helper.make_node("Gather", ["x", "idx"], ["g1"], axis=2, name="/unfold/Gather"),
                 helper.make_node("Gather", ["g1", "idx"], ["g2"], axis=4,
                                  name="/unfold/Gather_1")]
    else:
        nodes = [helper.make_node("Reshape", ["x", "six"], ["g2"], name="/unfold/Reshape_0")]
    nodes += [helper.make_node("Transpose", ["g2"], ["t"], perm=[0, 1, 2, 4, 3, 5],
                               name="/unfold/Transpose"),
              helper.make_node("Reshape", ["t", "shape"], ["y"], name="/unfold/Reshape")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(idx, "idx"),
         numpy_helper.from_array(np.array([1, 3, 4, 16], np.int64), "shape"),
         numpy_helper.from_array(np.array([1, 3, 2, 4, 2, 4], np.int64), "six")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_unfold_chain_becomes_one_gather_of_rank_at_most_five():
    model = _unfold_graph()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = _run(model, x)
    assert fold_index_chains(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Gather", "Reshape", "Gather", "Reshape"]
    ranks = [len(v.type.tensor_type.shape.dim) for v in
             onnx.shape_inference.infer_shapes(model).graph.value_info]
    assert max(ranks) <= 5
    np.testing.assert_array_equal(_run(model, x), want)


def test_chain_without_a_gather_is_left_alone():
    model = _unfold_graph(with_gather=False)  # a Swin-style window partition: HTP takes it
    assert fold_index_chains(model) == 0
