"""Graph feeds from one dataset row's raw values, for every modality: text through the
model's tokenizer (padded to the graph's length), an image through its image processor at the
graph's size, audio through its feature extractor at the graph's length."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Feed, Prepared
from executors.evaluation.data import audio_array, image_array
from executors.onnx.iospecs import kind_of
from executors.samples import media
from executors.samples import text as shipped_text


def tokenizer(cx: Context) -> Any:
    tok = shipped_text.tokenizer(cx.checkpoint)
    if tok is None:
        raise EvalDataError(f"eval: the checkpoint ({cx.checkpoint}) has no tokenizer files "
                            "(tokenizer.json, vocab.txt...); eval of a text model needs them; "
                            "add the tokenizer to the checkpoint folder")
    return tok


def seq_len(cx: Context) -> int:
    ids = next((s for s in cx.inputs if kind_of(s) == "token_ids"), None)
    if ids is None:
        raise EvalDataError("eval: the graph takes no token ids; its task needs text input")
    return int(ids["shape"][1])


def text_feed(cx: Context, enc: dict[str, Any]) -> Feed:
    """A tokenizer's encoding (batch 1, padded to the graph's length) as the graph's feed."""
    ids = np.asarray(enc["input_ids"], np.int64).reshape(1, -1)
    mask = np.asarray(enc.get("attention_mask", np.ones_like(ids)), np.int64).reshape(1, -1)
    types = enc.get("token_type_ids")
    inputs = [(kind_of(spec), spec) for spec in cx.inputs]
    for kind, spec in inputs:
        if kind not in shipped_text.TEXT_KINDS:
            raise EvalDataError(f"eval: the graph's input {spec['name']!r} is not one a text "
                                "dataset feeds; evaluate with the model's own inputs")
    return shipped_text.encoded_feed(
        inputs, ids, mask, np.asarray(types, np.int64).reshape(1, -1) if types is not None
        else None)


def encode(cx: Context, text: str, pair: str | None = None, **kw: Any) -> dict[str, Any]:
    return tokenizer(cx)(text, pair, padding="max_length", truncation=True,
                         max_length=seq_len(cx), return_tensors="np", **kw)


@cache
def _processor(ckpt: Path | None) -> Any:
    return media.image_processor(ckpt)


@cache
def _extractor(ckpt: Path | None) -> Any:
    return media.feature_extractor(ckpt)


def image_feed(cx: Context, value: Any) -> Feed:
    spec = next((s for s in cx.inputs if kind_of(s) == "pixels"), None)
    if spec is None:
        raise EvalDataError("eval: the graph takes no pixel_values; its task needs an image")
    img = image_array(value)
    return {spec["name"]: media.pixels(img, spec["shape"], _processor(cx.checkpoint))[None]}


def audio_feed(cx: Context, value: Any) -> Feed:
    spec = next((s for s in cx.inputs if kind_of(s) in ("waveform", "spectrogram",
                                                         "mel_features")), None)
    if spec is None:
        raise EvalDataError("eval: the graph takes no audio input; its task needs audio")
    extractor = _extractor(cx.checkpoint)
    rate = int(getattr(extractor, "sampling_rate", media.RATE) or media.RATE)
    wav = audio_array(value, rate)
    if kind_of(spec) == "waveform":
        wav = media.fitted_waveform(wav, int(spec["shape"][1]), extractor, rate)
        return {spec["name"]: wav.astype(np.float32)[None]}
    if extractor is None:
        raise EvalDataError("eval: the checkpoint has no feature extractor to compute the "
                            "spectrogram its graph takes; add preprocessor_config.json")
    if kind_of(spec) == "mel_features":  # [mel bins, frames]: the extractor pads to its window
        return {spec["name"]: media.extracted(wav, extractor, rate, "input_features")[None]}
    feats = media.extracted(wav, extractor, rate, spec["name"])  # by the graph's input name
    try:
        return {spec["name"]: media.fitted_frames(feats, int(spec["shape"][1]),
                                                  int(spec["shape"][2]))[None]}
    except LookupError as exc:
        raise EvalDataError(f"eval: {exc}; rebuild with the checkpoint's feature "
                            "extractor") from exc


def dense_rows(rows: list[dict[str, Any]], cx: Context, role: str,
               read: Callable[[Any], np.ndarray]) -> Prepared:
    """Feeds of each row's image; `extra` per row: its truth map under `role` read by `read`
    (None without labels) and the size predictions are upsampled to (the map's, else the
    image's)."""
    feeds, extra = [], []
    for row in rows:
        img = image_array(row["image"])
        feeds.append(image_feed(cx, img))
        truth = None
        if cx.labelled:
            if row.get(role) is None:
                raise EvalDataError(f"eval.dataset.columns.{role}: a row has no {role}; map the "
                                    f"{role} role to a column every row fills")
            truth = read(row[role])
        extra.append((truth, truth.shape if truth is not None else img.shape[:2]))
    return Prepared(feeds, rows, extra)


def modality_feed(cx: Context, row: dict[str, Any]) -> Feed:
    """The feed of a row whose input is one image, one audio clip or a text (and pair)."""
    if "image" in row:
        return image_feed(cx, row["image"])
    if "audio" in row:
        return audio_feed(cx, row["audio"])
    return text_feed(cx, encode(cx, str(row["text"]), _pair(row)))


def _pair(row: dict[str, Any]) -> str | None:
    value = row.get("text_pair")
    return None if value is None else str(value)
