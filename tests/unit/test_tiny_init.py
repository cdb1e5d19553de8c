"""The tiny random-weight models whose default initialisation leaves their outputs too small to
quantize (below the quantizer's smallest activation range, 1e-4) get a larger
initializer_range: their outputs must be of a size a quantized build can be judged on."""

from __future__ import annotations

import pytest

from planner.models.tiny import TINY

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

MIN_RANGE = 1e-4  # ORT's QNN QDQ config: no activation range is narrower than this


def _output(model_type: str, cls: str, fields: dict, size: int) -> torch.Tensor:
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **fields)
    model = getattr(transformers, cls)(config).eval()
    pixels = torch.rand(1, 3, size, size) * 2 - 1
    with torch.no_grad():
        out = model(pixel_values=pixels)
    return out.logits if hasattr(out, "logits") else out.predicted_depth


@pytest.mark.parametrize(("model_type", "cls", "size"), [
    ("mobilevit", "MobileViTForImageClassification", 64),
    ("dpt", "DPTForDepthEstimation", 32)])
def test_tiny_outputs_are_above_the_quantizer_floor(model_type: str, cls: str,
                                                    size: int) -> None:
    fields = TINY[model_type]
    assert fields["initializer_range"] > 0.02
    tuned = _output(model_type, cls, fields, size)
    default = _output(model_type, cls, {**fields, "initializer_range": 0.02}, size)
    assert float(default.std()) < MIN_RANGE  # what the default initialisation gave
    assert float(tuned.std()) > 100 * MIN_RANGE
