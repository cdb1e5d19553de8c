"""Sample inputs for export checks, calibration, verification and perf, for every modality,
offline: the shipped sentences through the model's tokenizer, photographs through its image
processor, speech through its feature extractor, and for a decoder the encoder's own states
on those inputs. Seeded random values inside each spec's range only where the model has no
preprocessor for an input, and then `Samples.origin` says so. Attention masks include padding
so masking is exercised. A random-weight checkpoint gets the preprocessor its model type
pairs with (preprocessors.py), so its samples are preprocessed as a real one's.

Splits: "calibration" and "verify" use disjoint sentences and photographs; "perf" any.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import numpy as np

from executors.onnx.artifacts import SOURCE
from executors.onnx.iospecs import kind_of
from executors.samples import generation, media, text

DTYPES = {"int64": np.int64, "int32": np.int32, "float32": np.float32, "float16": np.float16,
          "bool": np.bool_}
SEEDS = {"calibration": 0, "verify": 1, "perf": 2}
# the groups whose feeds run the checkpoint in PyTorch (an encoder's states, a cache)
TORCH_GROUPS = (text.DECODER_KINDS, generation.LM_KINDS, generation.S2S_KINDS)


def checkpoint_dir(source: Path | None) -> Path | None:
    """The checkpoint directory of a resolve output, if the source is a checkpoint."""
    if source is None or not (source / SOURCE).is_file():
        return None
    ckpt = json.loads((source / SOURCE).read_text()).get("checkpoint")
    if not ckpt:
        return None
    return Path(ckpt) if Path(ckpt).is_absolute() else source / ckpt


class Samples:
    """Feeds for one graph, made lazily per modality; `origin` says where each came from."""

    def __init__(self, specs: list[dict[str, Any]], split: str, seed: int = 0,
                 source: Path | None = None) -> None:
        self.specs, self.split, self.source = specs, split, source
        self.rng = np.random.default_rng(seed + SEEDS[split])
        self.ckpt = checkpoint_dir(source)
        self.origins: dict[str, str] = {}

    @property
    def origin(self) -> str:
        """e.g. "sentences via tokenizer; photographs via image processor", or "random"."""
        kinds = sorted(set(self.origins.values()))
        return "; ".join(kinds) if kinds else "random"

    @property
    def random(self) -> bool:
        return any(v.startswith("random") for v in self.origins.values())

    def feeds(self, n: int) -> list[dict[str, np.ndarray]]:
        by_kind = {kind_of(s): s for s in self.specs}
        made: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
        for group in (text.TEXT_KINDS, ("pixels",), ("waveform", "spectrogram", "mel_features"),
                      text.DECODER_KINDS, generation.LM_KINDS, generation.S2S_KINDS):
            wanted = {k: by_kind[k] for k in group if k in by_kind}
            if group in (text.DECODER_KINDS, generation.S2S_KINDS) and self.source is None:
                continue  # encoder states need the torch model: random values, said below
            if group == text.DECODER_KINDS and "s2s_past" in by_kind:
                continue  # the cached decoder's encoder mask comes with its step (below)
            if wanted:
                for feed, part in zip(made, self._group(wanted, n), strict=True):
                    feed.update(part)
                if group in TORCH_GROUPS:  # the torch model that made them (its modules
                    gc.collect()  # refer to each other): freed now, not when the heavy work
                    # of the caller (the quantizer's) next collects
        for spec in self.specs:  # anything no real source covers
            if spec["name"] not in made[0]:
                for feed in made:
                    feed[spec["name"]] = self._random(spec)
                self.origins[spec["name"]] = "random values"
        return [{s["name"]: f[s["name"]].astype(DTYPES[s["dtype"]]) for s in self.specs}
                for f in made]

    def _group(self, wanted: dict[str, dict[str, Any]], n: int) -> list[dict[str, np.ndarray]]:
        if "pixels" in wanted:
            return [self._images(wanted["pixels"], i) for i in range(n)]
        if {"waveform", "spectrogram", "mel_features"} & set(wanted):
            return [self._audio(wanted, i) for i in range(n)]
        if "s2s_past" in wanted:
            got = generation.step_feeds(wanted, self.specs, n, self.split, self.source, self.ckpt,
                                 self.rng)
            self.origins["decoding"] = got.origin
            return got.feeds
        if set(wanted) & set(generation.LM_KINDS):
            got = generation.lm_feeds(wanted, self.specs, n, self.split, self.source, self.ckpt,
                                      self.rng) \
                if self.source is not None else generation.random_feeds(wanted, n, self.specs,
                                                                        self.rng)
            self.origins["lm"] = got.origin
            return got.feeds
        if set(wanted) & set(text.DECODER_KINDS):
            got = text.decoder_feeds(wanted, n, self.split, self.source, self.ckpt, self.rng)
            self.origins["decoding"] = got.origin
            return got.feeds
        with_image = any(kind_of(s) == "pixels" for s in self.specs)
        got = text.query_feeds(wanted, n, self.ckpt, self.rng) if with_image else \
            text.text_feeds(wanted, n, self.split, self.ckpt, self.rng)
        self.origins["text"] = got.origin
        return got.feeds

    def _images(self, spec: dict[str, Any], i: int) -> dict[str, np.ndarray]:
        processor = media.image_processor(self.ckpt)
        self.origins["pixels"] = "photographs via " + (
            "the model's image processor" if processor is not None else "ImageNet normalization")
        pool = media.views(self.split)
        batch = spec["shape"][0]
        imgs = [media.pixels(pool[(i * batch + b) % len(pool)], spec["shape"], processor)
                for b in range(batch)]
        return {spec["name"]: np.stack(imgs)}

    def _audio(self, wanted: dict[str, dict[str, Any]], i: int) -> dict[str, np.ndarray]:
        extractor = media.feature_extractor(self.ckpt)
        lines = text.sentences(self.split)
        spec = wanted.get("waveform") or wanted.get("spectrogram") or wanted["mel_features"]
        batch = spec["shape"][0]
        said = [lines[(i * batch + b) % len(lines)] for b in range(batch)]
        if "waveform" in wanted:
            self.origins["audio"] = "speech via " + ("the model's feature extractor"
                                                     if extractor is not None else "normalization")
            return {spec["name"]: np.stack([media.waveform(s, spec["shape"][1], extractor)
                                            for s in said])}
        try:
            out = np.stack([media.mel_features(s, spec["shape"], extractor)
                            if "mel_features" in wanted else
                            media.spectrogram(s, spec["shape"], extractor, spec["name"])
                            for s in said])
        except LookupError:
            self.origins["audio"] = "random values (no feature extractor for spectrograms)"
            return {spec["name"]: self._random(spec)}
        self.origins["audio"] = "speech via the model's feature extractor"
        return {spec["name"]: out}

    def _random(self, spec: dict[str, Any]) -> np.ndarray:
        shape, dtype = spec["shape"], DTYPES[spec["dtype"]]
        if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
            return self.rng.integers(int(spec["min"]), int(spec["max"]) + 1, size=shape)
        return self.rng.uniform(spec["min"], spec["max"], size=shape).astype(np.float32)


def batches(specs: list[dict[str, Any]], n: int, split: str, seed: int = 0,
            source: Path | None = None) -> list[dict[str, np.ndarray]]:
    """`n` input feeds for a graph whose inputs are `specs` (see Samples for the origin)."""
    return Samples(specs, split, seed, source).feeds(n)


def valid_positions(feed: dict[str, np.ndarray]) -> np.ndarray | None:
    """Boolean [batch, seq] of real (non-padding) tokens, when the inputs have a mask."""
    for name, value in feed.items():
        if "attention_mask" in name:
            return value.astype(bool)
    return None
