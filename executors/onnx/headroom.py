"""Headroom over the calibrated ranges of 16-bit activations (`quant.calibration.headroom`):
each activation's range, lowest and highest, is multiplied by the factor before the quantizer
reads it, so an input whose values pass what calibration saw is not clipped.

Calibration sees few values of a decode graph's tensors: one token a sample. Measured on tiny
OLMoE, Apertus and Hunyuan checkpoints (w8a16_pc, 16 samples, QDQ on the CPU EP), verify's
decode inputs passed the calibrated range of the attention scores by 43 % and of a query
projection by 26 %; clipped, the decode graph's logits fell to cosine 0.93. A factor k costs
log2(k) of an activation's 16 bits (1.5: 0.6 bit). An 8-bit activation has no bits to spare
for it, so the packaged 8-bit configuration keeps 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def widened(ranges: Path, factor: float) -> Path:
    """The calibration cache `ranges` with every range scaled by `factor` about zero (zero stays
    where it was: a range of one sign keeps its sign), written beside it; `ranges` itself when
    the factor is 1."""
    if factor == 1:
        return ranges
    from onnxruntime.quantization.calibrate import (
        TensorData,
        TensorsData,
        load_tensors_data,
        save_tensors_data,
    )

    out = ranges.with_name(f"{ranges.stem}.headroom-{factor:g}.json")
    if out.is_file():
        return out
    found = load_tensors_data(ranges)
    data = {}
    for name, got in found.data.items():
        attrs = got.to_dict()
        for k in ("lowest", "highest"):
            if k in attrs:
                attrs[k] = (np.asarray(attrs[k]) * factor).astype(np.asarray(attrs[k]).dtype)
        data[name] = TensorData.from_dict(attrs)
    save_tensors_data(TensorsData(found.calibration_method, data), out)
    return out
