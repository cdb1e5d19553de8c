"""Gemms HTP declines on its simulator (a computed C, as ONNX Runtime's MatMulAddFusion writes
it; alpha other than 1), quantized as `quant=w8a16_pc` quantizes for it (QNN's QDQ
configuration: 8-bit per-channel weights, 16-bit activations): compile fails with CPU
fallback off as written, and compiles and agrees with the CPU once legalize rewrote them."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import onnx
import pytest

from executors.onnx.htp_gemm import gemms_htp_takes
from tests.unit.test_htp_gemm import feeds, gemm_model, run


def on_htp(tmp: Path, model: onnx.ModelProto, x: dict[str, np.ndarray]) -> np.ndarray:
    """`model` quantized, compiled on HTP with CPU fallback off and run on `x`, in a fresh
    interpreter (the QNN backend loads once per process). Raises RuntimeError with ORT's
    message where the compile fails."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        error, out = pool.apply(_compiled_and_run, (str(tmp), model.SerializeToString(), x))
    if error:
        raise RuntimeError(error)
    return out


def _compiled_and_run(tmp: str, model_bytes: bytes,
                      x: dict[str, np.ndarray]) -> tuple[str, np.ndarray | None]:
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    from executors.runtime import qnn
    from planner.core.targets import named

    class Reader:
        def __init__(self) -> None:
            self.left = [x]

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    try:
        Path(tmp).mkdir()
        src, built = Path(tmp) / "fp32.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(onnx.load_from_string(model_bytes), str(src))
        quantize(str(src), str(built), get_qnn_qdq_config(
            str(src), Reader(), activation_type=QuantType.QUInt16,
            weight_type=QuantType.QUInt8, per_channel=True))
        return "", qnn.session(built, named("qnn_htp"), {}, cpu_fallback=False).run(None, x)[0]
    except Exception as exc:  # noqa: BLE001 - ORT's exceptions do not cross processes
        return f"{type(exc).__name__}: {exc}", None


@pytest.mark.parametrize("form", [("computed", 1.0), ("constant", 0.5)],
                         ids=["computed C (MatMulAddFusion's)", "alpha 0.5"])
def test_a_gemm_htp_declines_compiles_once_rewritten(tmp_path: Path, form) -> None:
    c, alpha = form
    model = gemm_model(c, alpha=alpha)
    x = feeds(model)
    want = run(model, x)
    with pytest.raises(RuntimeError, match="fallback to CPU EP has been explicitly disabled"):
        on_htp(tmp_path / "as_fused", model, x)
    assert gemms_htp_takes(model) == 1
    got = on_htp(tmp_path / "split", model, x)
    cosine = float(np.dot(got.ravel(), want.ravel())
                   / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.999, cosine
