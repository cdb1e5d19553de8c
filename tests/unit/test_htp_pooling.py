"""Pooling forms HTP declines or computes wrongly, rewritten exactly: each rewrite equals the
original on the CPU; the checker names what is left (dilated pooling)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from executors.onnx.htp_pooling import declined, global_average_pools, pad_max_pools
from executors.onnx.htp_rewrites import violations


def _pool(op: str, shape: list[int], before: str | None = None, **attrs) -> onnx.ModelProto:
    nodes = [helper.make_node(before, ["x"], ["h"], name="/act")] if before else []
    nodes.append(helper.make_node(op, ["h" if before else "x"], ["y"], name="/stage.3/pool",
                                  **attrs))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("shape, attrs", [
    ([1, 4, 16, 16], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ([1, 4, 15, 15], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ([1, 4, 16], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ([1, 4, 9, 9], {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 2]}),
])
def test_padded_max_pool_becomes_edge_pad_and_equal(shape, attrs):
    model = _pool("MaxPool", shape, **attrs)
    x = -np.abs(np.random.default_rng(0).standard_normal(shape)).astype(np.float32)
    want = _run(model, x)
    assert pad_max_pools(model) == 1
    ops = [n.op_type for n in model.graph.node]
    assert ops[-1] == "MaxPool" and set(ops[:-1]) == {"Slice", "Concat"}
    assert not any(a.name == "pads" for a in model.graph.node[-1].attribute)
    np.testing.assert_array_equal(_run(model, x), want)


def test_max_pool_after_relu_keeps_its_pads():
    model = _pool("MaxPool", [1, 4, 8, 8], before="Relu", kernel_shape=[3, 3], strides=[2, 2],
                  pads=[1, 1, 1, 1])
    assert pad_max_pools(model) == 0


@pytest.mark.parametrize("shape, attrs, ops", [
    ([1, 4, 1, 1], {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
     ["ReduceMean"]),
    ([1, 4, 2, 2], {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
     ["ReduceMean", "Expand"]),
    ([1, 4, 3], {"kernel_shape": [5], "strides": [1], "pads": [2, 2]}, ["ReduceMean", "Expand"]),
])
def test_average_pool_covering_its_input_becomes_reduce_mean(shape, attrs, ops):
    model = _pool("AveragePool", shape, count_include_pad=0, **attrs)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = _run(model, x)
    assert global_average_pools(model) == 1
    assert [n.op_type for n in model.graph.node] == ops
    np.testing.assert_allclose(_run(model, x), want, rtol=1e-6, atol=1e-7)


def test_padless_average_pool_whose_kernel_passes_its_input_becomes_reduce_mean():
    """EfficientNet's pooler: kernel 320 (its hidden size) with ceil_mode on a 2x2 map, which
    the QNN EP declines after its NHWC layout transformation."""
    model = _pool("AveragePool", [1, 4, 2, 2], count_include_pad=1, kernel_shape=[320, 320],
                  strides=[320, 320], pads=[0, 0, 0, 0], ceil_mode=1)
    x = np.random.default_rng(2).standard_normal([1, 4, 2, 2]).astype(np.float32)
    want = _run(model, x)
    assert global_average_pools(model) == 1
    assert [n.op_type for n in model.graph.node] == ["ReduceMean"]
    np.testing.assert_allclose(_run(model, x), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(want.reshape(4), x.mean(axis=(2, 3)).reshape(4), rtol=1e-6)


def test_padded_average_pool_counting_its_pads_is_kept():
    model = _pool("AveragePool", [1, 4, 1, 1], count_include_pad=1, kernel_shape=[3, 3],
                  strides=[1, 1], pads=[1, 1, 1, 1])
    assert global_average_pools(model) == 0


def test_average_pool_with_partial_windows_is_kept():
    model = _pool("AveragePool", [1, 4, 8, 8], count_include_pad=0, kernel_shape=[3, 3],
                  strides=[1, 1], pads=[1, 1, 1, 1])
    assert global_average_pools(model) == 0


def test_dilated_pooling_is_named_with_its_module():
    model = _pool("MaxPool", [1, 4, 16, 16], kernel_shape=[3, 3], dilations=[2, 2])
    assert declined(model) == [("dilated MaxPool node '/stage.3/pool' (HTP declines dilated "
                               "pooling)")]
    assert violations(model) == declined(model)


def test_ops_outside_the_table_are_violations_with_their_module():
    # MaxUnpool: no builder in the QNN EP (LpPool has one in the installed build)
    model = _pool("MaxUnpool", [1, 4, 8, 8], kernel_shape=[2, 2])
    said = "MaxUnpool node '/stage.3/pool' in /stage.3 (HTP has no MaxUnpool)"
    assert violations(model) == [said]
    assert violations(_pool("LpPool", [1, 4, 8, 8], kernel_shape=[2, 2])) == []


def test_contrib_ops_the_installed_qnn_ep_builds_are_legal():
    """ORT's transformer fusion turns CLIP's GELU into com.microsoft QuickGelu, which the
    installed QNN EP has a builder for (the CLIP recipes compile for HTP with it)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("QuickGelu", ["x"], ["y"], name="/mlp/act", domain="com.microsoft",
                            alpha=1.702)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    assert violations(model) == []
