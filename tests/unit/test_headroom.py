"""`quant.calibration.headroom` (executors/onnx/headroom.py): each calibrated range, lowest and
highest, scaled about zero in a copy of ONNX Runtime's calibration cache that its quantizer
reads (a range of one sign keeps it), the cache itself at 1; and what a widened range does to
a value past the calibrated one, quantized to 16 bits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnxruntime.quantization.calibrate import (
    CalibrationMethod,
    TensorData,
    TensorsData,
    load_tensors_data,
    save_tensors_data,
)
from onnxruntime.quantization.quant_utils import compute_scale_zp

from executors.onnx.headroom import widened


def _cache(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx.ranges-0123.json"
    save_tensors_data(TensorsData(CalibrationMethod.MinMax, {
        "scores": TensorData(lowest=np.float32(-12.7), highest=np.float32(13.6)),
        "probs": TensorData(lowest=np.float32(0.0), highest=np.float32(1.0))}), path)
    return path


def test_ranges_are_scaled_about_zero(tmp_path: Path) -> None:
    got = load_tensors_data(widened(_cache(tmp_path), 1.5)).data
    assert np.isclose(got["scores"].lowest, -19.05) and np.isclose(got["scores"].highest, 20.4)
    assert got["probs"].lowest == 0 and np.isclose(got["probs"].highest, 1.5)
    assert got["scores"].lowest.dtype == np.float32


def test_a_factor_of_one_is_the_cache_itself(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert widened(cache, 1) == cache and widened(cache, 1.0) == cache
    assert widened(cache, 2) == widened(cache, 2)  # written once


def test_a_value_past_the_calibrated_range_is_kept_at_a_fraction_of_a_bit() -> None:
    """A score of 18.2 after calibration saw 13.6 (an OLMoE decode graph's): clipped by 4.6 as
    calibrated; within a step of the wider range's uint16 grid with the headroom."""
    def roundtrip(x: float, lo: float, hi: float) -> float:
        zp, scale = compute_scale_zp(np.float32(lo), np.float32(hi), np.int32(0), np.int32(65535),
                                     symmetric=False)
        q = np.clip(np.round(x / scale) + zp, 0, 65535)
        return float((q - zp) * scale)
    assert abs(roundtrip(18.2, -12.7, 13.6) - 18.2) > 4.5
    lo, hi = -12.7 * 1.5, 13.6 * 1.5
    assert abs(roundtrip(18.2, lo, hi) - 18.2) <= (hi - lo) / 65535
