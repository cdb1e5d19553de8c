"""Images are resized with the filter the model's own image processor resizes with
(executors/samples/media.py): what calibration, verify and eval feed is what the model's
processor would have made of the same photo."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from PIL import Image

from executors.samples import media


def _processor(name: str) -> Any:  # a transformers image processor
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, name)()


def test_pixels_are_resized_with_the_processors_filter() -> None:
    img = media.photo("astronaut")
    shape = [1, 3, 224, 224]
    for name, want in (("ViTImageProcessor", Image.Resampling.BILINEAR),
                       ("ConvNextImageProcessor", Image.Resampling.BICUBIC)):
        processor = _processor(name)
        assert media.resample(processor) == want
        got = media.pixels(img, shape, processor)
        resized = np.asarray(Image.fromarray(img).resize((224, 224), want))
        ref = processor(images=resized, do_resize=False, do_center_crop=False,
                        return_tensors="np")["pixel_values"][0]
        np.testing.assert_allclose(got, ref, atol=1e-6)
    vit = _processor("ViTImageProcessor")
    bicubic = np.asarray(Image.fromarray(img).resize((224, 224), Image.Resampling.BICUBIC))
    other = vit(images=bicubic, do_resize=False, return_tensors="np")["pixel_values"][0]
    assert np.abs(media.pixels(img, shape, vit) - other).max() > 0.1  # the filter shows


def test_without_a_processor_the_filter_is_bicubic() -> None:
    assert media.resample(None) == Image.Resampling.BICUBIC
    assert media.resample(type("P", (), {"resample": None})()) == Image.Resampling.BICUBIC
