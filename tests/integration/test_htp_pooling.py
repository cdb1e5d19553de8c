"""Pooling on the HTP simulator: one pooling node compiled with CPU fallback off, QDQ with
16-bit activations or fp32 at fp16 precision. What HTP computes wrongly (a padded MaxPool
quantized; an AveragePool(count_include_pad=0) on a 1x1 map in both) is right once legalize
rewrote it; a dilated pool is declined."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from executors.onnx.htp_pooling import global_average_pools, pad_max_pools

# (op, input shape, attributes, the rewrite, whether HTP gets it wrong quantized / at fp16)
CASES = {
    "padded MaxPool": ("MaxPool", [1, 8, 16], {"kernel_shape": [3], "strides": [2],
                                               "pads": [1, 1]}, pad_max_pools, (True, False)),
    "AveragePool on 1x1": ("AveragePool", [1, 8, 1, 1],
                           {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                            "count_include_pad": 0}, global_average_pools, (True, True)),
}


def _pool_model(op: str, shape: list[int], **attrs) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="/pool", **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _on_htp(tmp_path: Path, model: onnx.ModelProto, x: np.ndarray, fp16: bool) -> np.ndarray:
    """`model` compiled on HTP (CPU fallback off) and run on `x`: fp32 at fp16 precision, or
    QDQ with 16-bit activations calibrated on `x`. In a fresh interpreter: the QNN backend is
    loaded once per process, so a session an earlier test opened in this one (builds run in
    the test's process) must not decide what HTP computes here."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        error, out = pool.apply(_compiled_and_run, (str(tmp_path), model.SerializeToString(),
                                                    x, fp16))
    if error:
        raise RuntimeError(error)
    return out


def _compiled_and_run(tmp: str, model_bytes: bytes, x: np.ndarray,
                      fp16: bool) -> tuple[str, np.ndarray | None]:
    # ORT's exceptions do not cross processes: their message does
    try:
        return "", _compile_and_run(Path(tmp), onnx.load_from_string(model_bytes), x, fp16)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}", None


def _compile_and_run(tmp_path: Path, model: onnx.ModelProto, x: np.ndarray,
                     fp16: bool) -> np.ndarray:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    from executors.runtime import qnn
    from planner.core.targets import named

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{"x": x}]

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    tmp_path.mkdir(exist_ok=True)
    src, built = tmp_path / "fp32.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, str(src))
    target = named("qnn_htp")
    if fp16:
        built, options = src, target.fp16_provider_options
    else:
        quantize_static(str(src), str(built), Reader(), activation_type=QuantType.QUInt16,
                        weight_type=QuantType.QUInt8)
        options = {}
    with qnn.native_log():
        sess = qnn.session(built, target, options, cpu_fallback=False)
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("fp16", [False, True], ids=["qdq16", "fp16"])
@pytest.mark.parametrize("case", list(CASES))
def test_pooling_htp_gets_wrong_is_right_once_rewritten(tmp_path, case, fp16):
    import onnxruntime as ort

    op, shape, attrs, rewrite, wrong = CASES[case]
    model = _pool_model(op, shape, **attrs)
    x = -np.abs(np.random.default_rng(0).standard_normal(shape)).astype(np.float32) - 0.5
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    before = np.abs(_on_htp(tmp_path / "before", model, x, fp16) - want).max()
    assert bool(before > 0.1) == wrong[fp16], before
    assert rewrite(model) == 1
    assert np.abs(_on_htp(tmp_path / "after", model, x, fp16) - want).max() < 1e-2


def test_dilated_pooling_is_declined_by_htp(tmp_path):
    model = _pool_model("MaxPool", [1, 8, 16], kernel_shape=[3], strides=[2], dilations=[2])
    x = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)
    with pytest.raises(Exception, match="CPU"):
        _on_htp(tmp_path, model, x, fp16=False)
