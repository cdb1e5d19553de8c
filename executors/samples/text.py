"""Text samples: the shipped sentences through the model's tokenizer (random token ids with a
padded mask when it has none), layout boxes for document models, and a decoder's inputs: the
target tokens, and the encoder's own states on the matching source sentence or photograph."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from executors.samples.media import SENTENCES

TEXT_KINDS = ("token_ids", "attention_mask", "token_types", "boxes")
DECODER_KINDS = ("decoder_ids", "encoder_hidden_states", "encoder_attention_mask")
QUERIES = ("a photo of a cat", "a photo of a person", "a rocket", "a cup of coffee",
           "the moon", "a clock", "some coins", "a page of text")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "vocab.json",
                   "spiece.model", "sentencepiece.bpe.model", "source.spm")


@dataclass
class Got:
    feeds: list[dict[str, np.ndarray]]
    origin: str


def sentences(split: str) -> list[str]:
    lines = [ln.strip() for ln in SENTENCES.read_text().splitlines() if ln.strip()]
    return lines[0::2] if split == "calibration" else lines[1::2]


@cache
def tokenizer(ckpt: Path | None) -> Any:
    if ckpt is None or not any((ckpt / f).is_file() for f in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(ckpt), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError):
        return None


def speech_for(model: Any, name: str, speech: list[np.ndarray], positions: int,
               extractor: Any) -> np.ndarray:
    """`speech` as the encoder's input `name` (a waveform [samples], else the extractor's
    frames [frames, features]) of the fewest samples or frames from which it gives
    `positions` positions, cut or padded with silence."""
    from executors.samples import media

    if name != "input_values" and extractor is None:
        raise LookupError("the checkpoint has no feature extractor to compute the filter-bank "
                          "frames its encoder takes; add its preprocessor_config.json")
    width = None if name == "input_values" else int(extractor.feature_size)
    count = _positions_counter(model, name, width)
    high = 16
    while count(high) < positions:
        high *= 2
    low = high // 2
    while high - low > 1:  # the fewest that still give them
        mid = (low + high) // 2
        low, high = (low, mid) if count(mid) >= positions else (mid, high)
    if width is None:
        return np.stack([media.fitted_waveform(w, high, extractor, media.RATE) for w in speech])
    return np.stack([media.fitted_frames(media.extracted(w, extractor, media.RATE, name), high,
                                         width) for w in speech])


def _positions_counter(model: Any, name: str, width: int | None) -> Any:
    """steps -> the positions a speech encoder gives of that many samples or frames: the
    model's own count of what its convolutions make of a length where it has one, else the
    encoder's output on silence (none for a length shorter than a kernel)."""
    import torch

    from executors.runtime.torchmodel import encoder_of

    own = getattr(model, "_get_feat_extract_output_lengths", None)
    if own is not None:
        return lambda steps: int(own(torch.tensor(steps)))

    def run(steps: int) -> int:
        blank = torch.zeros(1, steps) if width is None else torch.zeros(1, steps, width)
        with torch.no_grad():
            try:
                out = encoder_of(model)(**{name: blank}, return_dict=True)
            except RuntimeError as exc:  # too short for a convolution's kernel: no position yet
                if "Kernel size" not in str(exc):
                    raise
                return 0
        return int(out.last_hidden_state.shape[1])

    return run


def _padded_mask(rng: np.random.Generator, batch: int, seq: int) -> np.ndarray:
    """A mask with padding in every row: a trace must see masking at work (a mask of all ones
    lets the model skip it, and the export would have no mask handling)."""
    valid = rng.integers(max(1, seq // 4), max(2, seq), size=batch)
    return (np.arange(seq)[None, :] < valid[:, None]).astype(np.int64)


def _boxes(mask: np.ndarray) -> np.ndarray:
    """Layout boxes for tokens written left to right on lines of a page (0..1000)."""
    batch, seq = mask.shape
    j = np.arange(seq)
    x0, y0 = (j % 10) * 95, (j // 10) * 30 % 970
    line = np.stack([x0, y0, x0 + 90, y0 + 25], axis=-1)
    return np.broadcast_to(line, (batch, seq, 4)).copy() * mask[..., None]


def encoded_feed(inputs: Iterable[tuple[str, dict[str, Any]]], ids: np.ndarray,
                 mask: np.ndarray, types: Any | None = None,
                 boxes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A text's encoding as the feed of the graph's text inputs, by kind ((kind, spec) pairs,
    kinds of TEXT_KINDS): its token ids, attention mask, token types (zeros where the
    tokenizer gives none) and layout boxes (zeros where none are given)."""
    feed = {}
    for kind, spec in inputs:
        if kind == "token_ids":
            feed[spec["name"]] = ids
        elif kind == "attention_mask":
            feed[spec["name"]] = mask
        elif kind == "token_types":
            feed[spec["name"]] = np.asarray(types) if types is not None else np.zeros_like(ids)
        elif kind == "boxes":
            feed[spec["name"]] = boxes if boxes is not None else \
                np.zeros((*ids.shape, 4), np.int64)
    return feed


def text_feeds(wanted: dict[str, dict[str, Any]], n: int, split: str, ckpt: Path | None,
               rng: np.random.Generator) -> Got:
    ids = wanted["token_ids"]
    batch, seq = ids["shape"][:2]
    tok = tokenizer(ckpt)
    lines = sentences(split)
    feeds = []
    for i in range(n):
        if tok is not None:
            texts = [lines[(i * batch + b) % len(lines)] for b in range(batch)]
            enc = tok(texts, padding="max_length", truncation=True, max_length=seq,
                      return_tensors="np")
            ids_v = np.asarray(enc["input_ids"])
            mask = np.array(enc.get("attention_mask", np.ones_like(ids_v)))
            mask[:, -1] = 0 if seq > 1 else mask[:, -1]  # always some padding (see _padded_mask)
            types = enc.get("token_type_ids")
        else:
            mask = _padded_mask(rng, batch, seq)
            ids_v = rng.integers(int(ids["min"]), int(ids["max"]) + 1, size=(batch, seq)) * mask
            if "end_id" in ids:  # the token the model pools at ends each real sequence
                ids_v[np.arange(batch), mask.sum(1) - 1] = ids["end_id"]
            types = None
        boxes = _boxes(mask) if "boxes" in wanted else None
        feeds.append(encoded_feed(wanted.items(), ids_v, mask, types, boxes))
    origin = "sentences via the model's tokenizer" if tok is not None else \
        "random token ids (the model has no tokenizer)"
    return Got(feeds, origin)


def query_feeds(wanted: dict[str, dict[str, Any]], n: int, ckpt: Path | None,
                rng: np.random.Generator) -> Got:
    """Text queries for a text + image model (zero-shot detection or classification)."""
    return text_feeds(wanted, n, "verify", ckpt, rng) if tokenizer(ckpt) is None else \
        _queries(wanted, n, tokenizer(ckpt))


def _queries(wanted: dict[str, dict[str, Any]], n: int, tok: Any) -> Got:
    ids = wanted["token_ids"]
    batch, seq = ids["shape"][:2]
    feeds = []
    for i in range(n):
        texts = [QUERIES[(i + b) % len(QUERIES)] for b in range(batch)]
        enc = tok(texts, padding="max_length", truncation=True, max_length=seq,
                  return_tensors="np")
        feed = {ids["name"]: np.asarray(enc["input_ids"])}
        if "attention_mask" in wanted:
            feed[wanted["attention_mask"]["name"]] = np.asarray(enc["attention_mask"])
        feeds.append(feed)
    return Got(feeds, "text queries via the model's tokenizer")


def decoder_feeds(wanted: dict[str, dict[str, Any]], n: int, split: str, source: Path | None,
                  ckpt: Path | None, rng: np.random.Generator) -> Got:
    """Target tokens, and the encoder's states on the matching source sentence or photograph
    (computed with the torch model: what the exported encoder gives, before quantization)."""
    from executors.runtime import torchmodel
    from executors.samples import media

    ids_spec, states_spec = wanted.get("decoder_ids"), wanted["encoder_hidden_states"]
    batch, enc_seq = states_spec["shape"][:2]
    steps = ids_spec["shape"][1] if ids_spec is not None else 1  # a cross graph: no ids
    model, _ = torchmodel.load(source)
    tok = tokenizer(ckpt)
    lines = sentences(split)
    pool = media.views(split)
    feeds = []
    for i in range(n):
        texts = [lines[(i * batch + b) % len(lines)] for b in range(batch)]
        enc_in, enc_mask = _encoder_inputs(model, tok, texts, enc_seq, pool, i, batch, ckpt,
                                           rng)
        states = encoder_states(model, enc_in)
        feed = {states_spec["name"]: states[:, :enc_seq]}
        if ids_spec is not None:
            feed[ids_spec["name"]] = np.asarray(tok(
                texts, padding="max_length", truncation=True, max_length=steps,
                return_tensors="np")["input_ids"]) if tok is not None else \
                rng.integers(0, int(ids_spec["max"]) + 1, size=(batch, steps))
        if "encoder_attention_mask" in wanted:
            feed[wanted["encoder_attention_mask"]["name"]] = enc_mask
        feeds.append(feed)
    origin = ("target sentences via the model's tokenizer" if tok is not None
              else "random target token ids") + "; encoder states of the torch encoder"
    return Got(feeds, origin)


def encoder_states(model: Any, enc_in: dict[str, np.ndarray]) -> np.ndarray:
    import torch

    from executors.runtime.torchmodel import encoder_of

    with torch.no_grad():
        feed = {k: torch.from_numpy(v) for k, v in enc_in.items()}
        return encoder_of(model)(**feed, return_dict=True).last_hidden_state.numpy()


def encoder_inputs(model: Any, tok: Any, texts: list[str], enc_seq: int, pool: list, i: int,
                   batch: int, ckpt: Path | None,
                   rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The encoder's inputs for shipped sentence `texts` (or photographs, or speech) and its
    attention mask."""
    return _encoder_inputs(model, tok, texts, enc_seq, pool, i, batch, ckpt, rng)


def _encoder_inputs(model: Any, tok: Any, texts: list[str], enc_seq: int, pool: list, i: int,
                    batch: int, ckpt: Path | None,
                    rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    from executors.samples import media

    config = model.config
    from executors.runtime.torchmodel import encoder_of

    takes = getattr(encoder_of(model), "main_input_name", None)
    if takes == "input_values" or (takes == "input_features"
                                   and not hasattr(config, "num_mel_bins")):
        # a waveform, or filter-bank frames (Speech2Text), the encoder's positions' worth
        extractor = media.feature_extractor(ckpt)
        speech = [media.speaker().say(t) for t in texts]
        return {takes: speech_for(model, takes, speech, enc_seq, extractor)}, \
            np.ones((batch, enc_seq), np.int64)
    if hasattr(config, "max_source_positions") and hasattr(config, "num_mel_bins"):
        shape = [batch, config.num_mel_bins, 2 * config.max_source_positions]
        extractor = media.feature_extractor(ckpt)
        speech = np.stack([media.mel_features(t, shape, extractor) for t in texts])
        return {"input_features": speech}, np.ones((batch, enc_seq), np.int64)
    vision = getattr(config, "encoder", None) or getattr(config, "vision_config", None)
    if vision is not None and hasattr(vision, "image_size"):  # an image captioner's
        size = vision.image_size
        h, w = (size, size) if isinstance(size, int) else size
        shape = [batch, getattr(vision, "num_channels", 3), h, w]
        processor = media.image_processor(ckpt)
        pixels = np.stack([media.pixels(pool[(i * batch + b) % len(pool)], shape, processor)
                           for b in range(batch)])
        return {"pixel_values": pixels}, np.ones((batch, enc_seq), np.int64)
    if tok is not None:
        enc = tok(texts, padding="max_length", truncation=True, max_length=enc_seq,
                  return_tensors="np")
        ids, mask = np.asarray(enc["input_ids"]), np.asarray(enc["attention_mask"])
    else:
        mask = _padded_mask(rng, batch, enc_seq)
        ids = rng.integers(0, config.vocab_size, size=(batch, enc_seq)) * mask
    return {"input_ids": ids, "attention_mask": mask}, mask
