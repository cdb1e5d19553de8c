"""Preprocessors for random-weight checkpoints: the image processor or feature extractor that
transformers pairs with the model type, sized to the config, saved beside the weights so that
calibration and verification samples go through the same preprocessing as a real checkpoint's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

RATE = 16000


def image_size(config: Any) -> tuple[int, int] | None:
    for part in (config, getattr(config, "vision_config", None), getattr(config, "encoder", None),
                 getattr(config, "backbone_config", None)):
        size = getattr(part, "image_size", None) if part is not None else None
        if isinstance(size, int):
            return size, size
        if isinstance(size, list | tuple) and len(size) == 2:
            return int(size[0]), int(size[1])
    return None


def write_preprocessor(model_type: str, config: Any, out: Path,
                       hints: dict[str, Any]) -> str | None:
    """Save the model type's preprocessor into `out`; the class name written, or None when
    transformers pairs none with this model type (text: no tokenizer for random weights).
    `hints` (model.random_init.preprocessor) give sizes the config does not."""
    if model_type == "vision-encoder-decoder":
        model_type = config.encoder.model_type
    size = hints.get("image_size")
    size = (size, size) if isinstance(size, int) else tuple(size) if size else image_size(config)
    processor = _image_processor(model_type, size) or \
        _feature_extractor(model_type, config, hints.get("sampling_rate", RATE))
    if processor is None:
        return None
    processor.save_pretrained(str(out))
    return type(processor).__name__


def _image_processor(model_type: str, size: tuple[int, int] | None) -> Any:
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type)
    if not names or size is None:
        return None
    name = names.get("pil") if isinstance(names, dict) else names
    cls = getattr(transformers, name or "", None)
    if cls is None:
        return None
    h, w = size
    for kwargs in ({"size": {"height": h, "width": w}, "do_center_crop": False, "do_pad": False},
                   {"size": {"height": h, "width": w}, "do_center_crop": False},
                   {"size": {"height": h, "width": w}},
                   {"size": {"shortest_edge": min(h, w)}, "crop_pct": 1.0}):
        try:
            return cls(**kwargs)
        except (TypeError, ValueError, KeyError):
            continue
    return None


def _feature_extractor(model_type: str, config: Any, rate: int) -> Any:
    import transformers
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(model_type)
    cls = getattr(transformers, name or "", None)
    if cls is None:
        return None
    if hasattr(config, "max_source_positions") and hasattr(config, "num_mel_bins"):
        # Whisper-like: log-mel frames, 10 ms each, two per encoder position
        frames = 2 * config.max_source_positions
        return cls(feature_size=config.num_mel_bins, sampling_rate=rate,
                   chunk_length=max(1, frames * 160 // rate), hop_length=160)
    # a spectrogram or filter-bank model: the extractor makes its frames, as wide as the
    # config's features (Speech2Text calls them input_feat_per_channel; Cohere ASR's are its
    # encoder_config's)
    mels = getattr(config, "num_mel_bins", None) or \
        getattr(getattr(config, "encoder_config", None), "num_mel_bins", None) or \
        getattr(config, "input_feat_per_channel", None)
    if mels:
        import inspect

        takes = inspect.signature(cls.__init__).parameters
        wanted = {"num_mel_bins": mels, "feature_size": mels, "sampling_rate": rate,
                  "max_length": getattr(config, "max_length", None)}
        return cls(**{k: v for k, v in wanted.items() if k in takes and v is not None})
    return cls(sampling_rate=rate, do_normalize=True, return_attention_mask=False)


def settle_batchnorm(model: Any, checkpoint: Path, samples: int = 8) -> int:
    """Random weights with BatchNorm at its initial statistics collapse activations (a random
    MobileViT outputs exactly 0): estimate the statistics from real photographs through the
    model's image processor, as training would have. Returns the BatchNorm layers settled."""
    import torch

    from executors.samples import media

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    processor = media.image_processor(checkpoint)
    size = image_size(model.config) or (getattr(processor, "size", None) and (
        processor.size.get("height"), processor.size.get("width")))
    if not norms or processor is None or not size or None in size:
        return 0
    channels = getattr(model.config, "num_channels", 3)
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the samples
        norm.train()
    with torch.no_grad():
        for img in media.views("calibration")[:samples]:
            pixels = media.pixels(img, [1, channels, *size], processor)
            model(pixel_values=torch.from_numpy(pixels[None]))
    model.eval()
    return len(norms)
