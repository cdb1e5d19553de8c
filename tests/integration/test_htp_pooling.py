"""Pooling on the HTP simulator: one pooling node, QDQ with 16-bit activations, compiled with
CPU fallback off. A padded MaxPool runs but pads with zeros (wrong on negative inputs) until
legalize rewrites it; a dilated one is declined."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper


def _pool_model(path: Path, **attrs) -> None:
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], name="/pool", kernel_shape=[3], strides=[2],
                          **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _compiled_output(tmp_path: Path, src: Path, x: np.ndarray) -> np.ndarray:
    """The QDQ (16-bit activations) model of `src` compiled on HTP, CPU fallback off."""
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    from executors.runtime import qnn
    from planner.core.targets import named

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{"x": x}]

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    qdq = tmp_path / "qdq.onnx"
    quantize_static(str(src), str(qdq), Reader(), activation_type=QuantType.QUInt16,
                    weight_type=QuantType.QUInt8)
    with qnn.native_log():
        sess = qnn.session(qdq, named("qnn_htp"), {}, cpu_fallback=False)
    return sess.run(None, {"x": x})[0]


def test_padded_max_pool_is_wrong_on_htp_until_legalized(tmp_path):
    from executors.onnx.htp_pooling import pad_max_pools

    x = -np.abs(np.random.default_rng(0).standard_normal((1, 8, 16))).astype(np.float32)
    src = tmp_path / "pool.onnx"
    _pool_model(src, pads=[1, 1])
    import onnxruntime as ort

    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    raw = tmp_path / "raw"
    raw.mkdir()
    assert np.abs(_compiled_output(raw, src, x) - want).max() > 0.1  # zeros padded, not -inf
    model = onnx.load(str(src))
    assert pad_max_pools(model) == 1
    onnx.save(model, str(src))
    assert np.abs(_compiled_output(tmp_path, src, x) - want).max() < 1e-2


def test_dilated_pooling_is_declined_by_htp(tmp_path):
    src = tmp_path / "pool.onnx"
    _pool_model(src, dilations=[2])
    x = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)
    with pytest.raises(Exception, match="CPU"):
        _compiled_output(tmp_path, src, x)
