"""Forms the HTP simulator declines, quantized as `quant=w8a16_pc` quantizes for it (QNN's QDQ
configuration: 8-bit per-channel weights, 16-bit activations): each fails to compile with CPU
fallback off as written, and compiles and agrees with the CPU once rewritten.

* Gemms (legalize): a computed C, as ONNX Runtime's MatMulAddFusion writes it; alpha other
  than 1.
* A Gather over an activation whose output the quantizer encoded on its own range (after the
  quantizer).
* Computed wrongly rather than declined: an RMSNorm's `x * r` (r broadcast) followed by a Mul
  by a table (legalize puts r first); a Concat whose inputs' encodings differ from its output's
  (an interleaved rotary embedding's: after the quantizer, one encoding for all)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import onnx
import pytest

from executors.onnx.htp_encodings import concats_share_encodings, gathers_share_encodings
from executors.onnx.htp_gemm import gemms_htp_takes
from tests.unit import test_htp_encodings as gathers
from tests.unit.test_htp_gemm import feeds, gemm_model, run


def on_htp(tmp: Path, model: onnx.ModelProto, x: dict[str, np.ndarray],
           quantize: bool = True) -> np.ndarray:
    """`model` (quantized first unless it is a QDQ graph already), compiled on HTP with CPU
    fallback off and run on `x`, in a fresh interpreter (the QNN backend loads once per
    process). Raises RuntimeError with ORT's message where the compile fails."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        error, out = pool.apply(_compiled_and_run,
                                (str(tmp), model.SerializeToString(), x, quantize))
    if error:
        raise RuntimeError(error)
    return out


def _compiled_and_run(tmp: str, model_bytes: bytes, x: dict[str, np.ndarray],
                      quantize: bool) -> tuple[str, np.ndarray | None]:
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize as quantized
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
        src, built = Path(tmp) / "model.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(onnx.load_from_string(model_bytes), str(src))
        if quantize:
            quantized(str(src), str(built), get_qnn_qdq_config(
                str(src), Reader(), activation_type=QuantType.QUInt16,
                weight_type=QuantType.QUInt8, per_channel=True))
        else:
            built = src
        return "", qnn.session(built, named("qnn_htp"), {}, cpu_fallback=False).run(None, x)[0]
    except Exception as exc:  # noqa: BLE001 - ORT's exceptions do not cross processes
        return f"{type(exc).__name__}: {exc}", None


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("form", [("computed", 1.0), ("constant", 0.5)],
                         ids=["computed C (MatMulAddFusion's)", "alpha 0.5"])
def test_a_gemm_htp_declines_compiles_once_rewritten(tmp_path: Path, form) -> None:
    c, alpha = form
    model = gemm_model(c, alpha=alpha)
    x = feeds(model)
    want = run(model, x)
    with pytest.raises(RuntimeError, match="fallback to CPU EP has been explicitly disabled"):
        on_htp(tmp_path / "as_written", model, x)
    assert gemms_htp_takes(model) == 1
    assert cosine(on_htp(tmp_path / "rewritten", model, x), want) > 0.999


def test_a_gather_over_an_activation_compiles_with_its_datas_encoding(tmp_path: Path) -> None:
    import onnxruntime as ort

    model = onnx.load(str(gathers.quantized(tmp_path)))
    x = gathers.sample(9)
    with pytest.raises(RuntimeError, match="fallback to CPU EP has been explicitly disabled"):
        on_htp(tmp_path / "as_quantized", model, x, quantize=False)
    assert gathers_share_encodings(model) == 1
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert cosine(on_htp(tmp_path / "shared", model, x, quantize=False), want) > 0.9999


def test_a_concat_of_differently_encoded_inputs_is_right_once_they_share_one(
        tmp_path: Path) -> None:
    """GLM-4V's interleaved rotate-half: HTP reads the Concat's inputs as if they had its
    output's encoding, and the rotated keys came out offset (measured here: cosine 0.92)."""
    model = onnx.load(str(gathers.quantized(tmp_path, gathers.interleaved_rotation(),
                                            [gathers.keys(k) for k in range(4)])))
    x = gathers.keys(9, -0.38, 0.38)
    want = gathers.run_float(gathers.interleaved_rotation(), x)
    assert cosine(on_htp(tmp_path / "as_quantized", model, x, quantize=False), want) < 0.97
    assert concats_share_encodings(model) == 1
    assert cosine(on_htp(tmp_path / "shared", model, x, quantize=False), want) > 0.9999


@pytest.mark.parametrize("norm", ["mul", "div"])
def test_a_norm_without_weight_then_a_table_is_right_once_its_reciprocal_goes_first(
        tmp_path: Path, norm: str) -> None:
    # T5Gemma 2's encoder: its query's RMSNorm (a random checkpoint's weight of ones is an
    # Identity by then) and the rotary table; HTP computes the chain wrongly, silently
    from executors.onnx.htp_math import broadcast_first_muls
    from tests.unit import test_broadcast_first_muls as chain

    model = chain.norm_then_table(norm)
    want = chain.run(model)
    assert cosine(on_htp(tmp_path / "as_written", model, chain.x()), want) < 0.5
    assert broadcast_first_muls(model) == 1
    assert cosine(on_htp(tmp_path / "rewritten", model, chain.x()), want) > 0.999
