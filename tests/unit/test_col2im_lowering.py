"""Col2Im (F.fold) lowered for a target without it: equal to ONNX Runtime's Col2Im on the CPU,
for tiling folds (a permutation) and overlapping, padded, dilated ones (a scatter MatMul)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.col2im_lowering import lower_col2ims


def _fold(c: int, image: list[int], block: list[int], **attrs) -> tuple[onnx.ModelProto, list]:
    rank = len(image)
    dil = attrs.get("dilations", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    strides = attrs.get("strides", [1] * rank)
    grid = [(image[a] + pads[a] + pads[a + rank] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1
            for a in range(rank)]
    shape = [1, c * int(np.prod(block)), int(np.prod(grid))]
    graph = helper.make_graph(
        [helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="/encoder/fold",
                          **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, *image])],
        [numpy_helper.from_array(np.array(image, np.int64), "image"),
         numpy_helper.from_array(np.array(block, np.int64), "block")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), shape


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("c, image, block, attrs, ops", [
    (3, [8, 8], [2, 2], {"strides": [2, 2]}, {"Reshape", "Transpose"}),
    (2, [6, 4], [3, 2], {"strides": [3, 2]}, {"Reshape", "Transpose"}),
    (2, [6, 6], [3, 3], {}, {"Reshape", "MatMul"}),
    (2, [7, 5], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1]}, {"Reshape", "MatMul"}),
    (1, [9, 9], [2, 2], {"dilations": [2, 3], "strides": [1, 2]}, {"Reshape", "MatMul"}),
])
def test_lowered_fold_equals_col2im(c, image, block, attrs, ops):
    model, shape = _fold(c, image, block, **attrs)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = _run(model, x)
    assert lower_col2ims(model) == 1
    assert {n.op_type for n in model.graph.node} == ops
    assert [i.name for i in model.graph.initializer if i.name in ("image", "block")] == []
    np.testing.assert_allclose(_run(model, x), want, rtol=1e-6, atol=1e-6)
