"""An encoder-decoder model's generation (text2text: BART, T5, Marian; speech: Whisper;
image-to-text: a vision encoder and a text decoder): the encoder graph once per input, then
the decoder from the start and forced tokens, one greedy loop.

The decoder is one of two roles (planner/models/roles.py): over a static cache, its cross
graph computes the cross-attention keys and values once and each step decodes one token at the
next slot; without a cache, it has a fixed length and each step feeds the prefix padded to it
and reads the logits at the prefix's last position (the decoder is causal, so the padding after
it changes nothing). Decoding starts from config.json's decoder_start_token_id and stops at the
end token, at the token cap or when the cache (or the graph's length) is full. PyTorch runs
the same loop through the same traced modules, so the models compare token for token."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from executors.generation import loop
from executors.generation.cache import StaticCache
from executors.onnx.iospecs import kind_of
from planner.models.roles import CACHE, Role, Trace, roles_of
from planner.models.seq2seq import decoder_config, special_token, start_token
from planner.models.tasks import ENCODER_OUTPUTS, model_type_of

Feed = dict[str, np.ndarray]
Forward = Callable[[Feed], dict[str, np.ndarray]]


class GenerationError(ValueError):
    """Graphs or a checkpoint that cannot be decoded as given: one line naming what and a fix."""


class Described(Protocol):
    """What decoding reads of a model: its task, its graphs' input specs and output names, its
    config.json (`info`) and its checkpoint folder (eval's Context is one)."""

    task: str
    specs: dict[str, list[dict[str, Any]]]
    outputs: dict[str, list[str]]
    checkpoint: Path | None
    info: dict[str, Any]


@dataclass(frozen=True)
class Decoding:
    start: int                 # decoder_start_token_id
    eos: int | None            # None: every output runs to the cap or the graph's length
    pad: int                   # fills the positions after the prefix
    length: int                # the decoder graph's sequence length (its cache's slots)
    forced: tuple[int, ...] = ()  # tokens after the start one (Whisper: language, task)
    most: int | None = None       # stop after this many new tokens (None: the graph's length)
    follow: tuple[int, ...] | None = None  # feed these tokens, not the argmax (teacher forcing)
    suppressed: tuple[int, ...] = ()        # never chosen (generation config: suppress_tokens,
    begin_suppressed: tuple[int, ...] = ()  # single-token bad_words_ids; and, as the first new
                                            # token, begin_suppress_tokens)

    def banned(self, i: int) -> tuple[int, ...]:
        """The tokens not chosen as the i-th new token."""
        return self.begin_suppressed + self.suppressed if i == 0 else self.suppressed


def _roles(d: Described) -> dict[str, Role]:
    return roles_of(d.specs)


def _graph(d: Described, *traces: Trace) -> str | None:
    return next((g for g, r in _roles(d).items() if r.trace in traces), None)


def decoder_graph(d: Described) -> str | None:
    return _graph(d, Trace.PREFIX_DECODER, Trace.STEP_DECODER)


def cached(d: Described) -> bool:
    """Whether the decoder is the one-token decoder over a static cache (with a cross graph)."""
    return _graph(d, Trace.STEP_DECODER) is not None


def decoding(d: Described) -> Decoding:
    """How `d` decodes: its start, end, pad and forced tokens, and its decoder's length."""
    decoder = decoder_graph(d)
    specs = d.specs.get(decoder, []) if decoder else []
    ids = next((s for s in specs if kind_of(s) in ("decoder_ids", "token_ids")), None)
    if cached(d):  # the one-token decoder: its length is its cache's (a free past's: the
        mask = next((s for s in specs if s["name"] == "attention_mask"), None)  # positions')
        ids = {"shape": [1, mask["shape"][1] - 1 if mask else decoder_positions(d.info)]}
    if ids is None:
        raise GenerationError(f"eval: {d.task} needs an encoder and a decoder graph taking "
                              "input_ids; build the model's encoder-decoder export")
    start = start_token(d.info)
    if start is None:
        raise GenerationError("eval: config.json has no decoder_start_token_id (nor "
                              "bos_token_id) to start decoding from; add "
                              "decoder_start_token_id to config.json")
    pad = special_token(d.info, "pad_token_id")
    mt = model_type_of(d.info)
    end = special_token(d.info, mt.end_token if mt is not None else "eos_token_id")
    return Decoding(start, end, 0 if pad is None else pad,
                    int(ids["shape"][1]), forced_tokens(d.checkpoint),
                    **suppressed_tokens(d.checkpoint))


def decoder_positions(info: dict[str, Any]) -> int:
    """The positions a decoder over a free past has (its position table's rows)."""
    dec = decoder_config(info)
    limit = dec.get("max_target_positions") or dec.get("max_position_embeddings")
    if not isinstance(limit, int):
        raise GenerationError("eval: config.json says no max_target_positions for the "
                              "decoder's positions; add it to config.json")
    return limit


def suppressed_tokens(checkpoint: Path | None) -> dict[str, tuple[int, ...]]:
    """The tokens the checkpoint's generation config never lets greedy decoding choose, as
    transformers' generate applies them: `suppress_tokens` and single-token `bad_words_ids`
    at every step, `begin_suppress_tokens` also at the first new token (Whisper's blank and
    end token)."""
    path = None if checkpoint is None else checkpoint / "generation_config.json"
    if path is None or not path.is_file():
        return {}
    gen = json.loads(path.read_text())
    always = [*(gen.get("suppress_tokens") or []),
              *(w[0] for w in gen.get("bad_words_ids") or [] if len(w) == 1)]
    return {"suppressed": tuple(sorted({int(t) for t in always})),
            "begin_suppressed": tuple(int(t) for t in gen.get("begin_suppress_tokens") or [])}


def forced_tokens(checkpoint: Path | None) -> tuple[int, ...]:
    """The tokens a speech model's generation config forces after the start token: the
    language and task of a multilingual Whisper (English, transcribe), then no timestamps."""
    path = None if checkpoint is None else checkpoint / "generation_config.json"
    if path is None or not path.is_file():
        return ()
    gen = json.loads(path.read_text())
    forced = [int(t) for _, t in sorted(gen.get("forced_decoder_ids") or []) if t is not None]
    if gen.get("is_multilingual") and gen.get("lang_to_id") and gen.get("task_to_id"):
        forced = [gen["lang_to_id"].get("<|en|>"), gen["task_to_id"].get("transcribe")]
    if gen.get("no_timestamps_token_id") is not None:
        forced.append(int(gen["no_timestamps_token_id"]))
    return tuple(t for t in forced if t is not None)


def _encoder_mask(encoder: Feed) -> np.ndarray | None:
    return next((v for k, v in encoder.items() if "attention_mask" in k), None)


class _PrefixDecoder:
    """The uncached decoder: each step feeds the whole prefix, padded to the graph's length."""

    def __init__(self, forward: Forward, specs: list[dict[str, Any]], logits: str,
                 states: np.ndarray, encoder: Feed, how: Decoding) -> None:
        self.forward, self.specs, self.logits, self.how = forward, specs, logits, how
        self.states, self.encoder = states, encoder
        self.prefix: list[int] = []

    def first(self) -> np.ndarray:
        self.prefix = [self.how.start, *self.how.forced]
        return self._row()

    def step(self, token: int) -> np.ndarray | None:
        if len(self.prefix) == self.how.length:
            return None
        self.prefix.append(token)
        return self._row()

    def _row(self) -> np.ndarray:
        ids = np.full((1, self.how.length), self.how.pad, np.int64)
        ids[0, :len(self.prefix)] = self.prefix
        return self.forward(self._feed(ids))[self.logits][0, len(self.prefix) - 1]

    def _feed(self, ids: np.ndarray) -> Feed:
        """The decoder graph's inputs: the padded ids, the encoder's states (cut to the graph's
        length) and, where it takes one, the encoder's attention mask."""
        feed: Feed = {}
        for spec in self.specs:
            kind = kind_of(spec)
            if kind in ("decoder_ids", "token_ids"):
                feed[spec["name"]] = ids
            elif kind == "encoder_hidden_states":
                feed[spec["name"]] = self.states[:, :int(spec["shape"][1])]
            elif kind == "encoder_attention_mask":
                mask = _encoder_mask(self.encoder)
                feed[spec["name"]] = mask if mask is not None else \
                    np.ones(spec["shape"], np.int64)
            else:
                raise GenerationError(f"eval: the decoder's input {spec['name']!r} is not one "
                                      "greedy decoding feeds; evaluate with verify instead "
                                      "(eval=none)")
        return feed


class _StepDecoder:
    """The cached decoder: the cross graph once, then one decoder call per token, its keys and
    values written into the next cache slot."""

    def __init__(self, forward: Forward, cross: Forward, specs: list[dict[str, Any]],
                 cross_specs: list[dict[str, Any]], logits: str, states: np.ndarray,
                 encoder: Feed, how: Decoding) -> None:
        self.forward, self.logits, self.how = forward, logits, how
        self.cache = StaticCache(specs)
        self.bound = min(how.length, self.cache.slots)
        width = int(cross_specs[0]["shape"][1])
        self.cross = cross({"encoder_hidden_states": states[:, :width]})
        self.masked = any(s["name"] == "encoder_attention_mask" for s in specs)
        self.mask_shape = next((s["shape"] for s in specs
                                if s["name"] == "encoder_attention_mask"), None)
        self.mask_in = _encoder_mask(encoder)

    def first(self) -> np.ndarray | None:
        row = None
        for token in (self.how.start, *self.how.forced):
            row = self.step(token)
            if row is None:
                return None
        return row

    def step(self, token: int) -> np.ndarray | None:
        if self.cache.seen >= self.bound:
            return None
        feed = {**self.cache.step_feed({"input_ids": np.array([[token]], np.int64)}),
                **self.cross}
        if self.masked:
            feed["encoder_attention_mask"] = self.mask_in if self.mask_in is not None else \
                np.ones(self.mask_shape, np.int64)
        got = self.forward(feed)
        self.cache.write(got)
        return got[self.logits][0, -1]


class _FreeStepDecoder:
    """The cached decoder over a free past (onnxruntime-genai's Whisper layout): the start and
    forced tokens at once on an empty past, then one token at a time, each call's present
    (past + new) the next call's past; the cross entries come from the encoder."""

    def __init__(self, forward: Forward, specs: list[dict[str, Any]], logits: str,
                 cross: Feed, how: Decoding) -> None:
        self.forward, self.logits, self.how, self.cross = forward, logits, how, cross
        self.past = {s["name"]: np.zeros((*s["shape"][:2], 0, s["shape"][3]), np.float32)
                     for s in specs if CACHE.is_past(s["name"])}
        self.seen = 0

    def first(self) -> np.ndarray | None:
        return self._run([self.how.start, *self.how.forced])

    def step(self, token: int) -> np.ndarray | None:
        return self._run([token])

    def _run(self, tokens: list[int]) -> np.ndarray | None:
        if self.seen + len(tokens) > self.how.length:
            return None
        got = self.forward({"input_ids": np.array([tokens], np.int64), **self.past,
                            **self.cross})
        self.past = {name: got[CACHE.present_of(name)] for name in self.past}
        self.seen += len(tokens)
        return got[self.logits][0, -1]


def generate(graphs: dict[str, Forward], encoder: Feed, d: Described,
             how: Decoding) -> loop.Generated:
    """One input's greedy decoding: the encoder once, then the decoder per token; the tokens
    end with the end token where it stopped there (`without_end()` drops it)."""
    roles = _roles(d)
    enc = next(g for g, r in roles.items() if r.trace is Trace.ENCODER)
    dec = decoder_graph(d)
    names = d.outputs.get(dec) or ["logits"]
    logits = "logits" if "logits" in names else names[0]
    outputs = graphs[enc](encoder)
    states = outputs.get(ENCODER_OUTPUTS[0], next(iter(outputs.values())))
    cross = {k: v for k, v in outputs.items() if k.startswith(CACHE.cross + ".")}
    if cross:  # the encoder gave the cross entries: the decoder reads a free past
        stepper: Any = _FreeStepDecoder(graphs[dec], d.specs[dec], logits, cross, how)
    elif roles[dec].reads_cache:
        given = next(g for g, r in roles.items() if r.gives_cross)
        stepper = _StepDecoder(graphs[dec], graphs[given], d.specs[dec], d.specs[given],
                               logits, states, encoder, how)
    else:
        stepper = _PrefixDecoder(graphs[dec], d.specs[dec], logits, states, encoder, how)
    eos = set() if how.eos is None else {how.eos}
    return loop.greedy(stepper.first, stepper.step, how.most, eos, how.follow, how.banned)
