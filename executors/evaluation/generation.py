"""Sequence-to-sequence generation (text2text: BART, T5, Marian; image-to-text: vision encoder +
text decoder) by greedy decoding: the encoder graph once per row, then the decoder graph step by
step. The decoder graph has a fixed length and no past key values: each step feeds the prefix
padded to that length and reads the logits at the prefix's last position (the decoder is causal,
so the padding after it changes nothing). Decoding starts from config.json's
decoder_start_token_id and stops at eos or at the graph's length. PyTorch runs the same loop
through the same wrapped modules, so the three models are comparable token for token. Scored
with BLEU, CER and exact match (executors/evaluation/textscore.py) against the `target` column,
else against PyTorch's outputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from executors.evaluation import textscore
from executors.evaluation.base import Context, EvalDataError, Evaluator, Feed, Forward, Prepared
from executors.evaluation.inputs import modality_feed
from executors.samples import kind_of
from planner.models.seq2seq import start_token
from planner.models.tasks import ENCODER_OUTPUTS, model_type_of

Logits = Callable[[np.ndarray], np.ndarray]  # padded decoder ids [1, L] -> logits [1, L, V]


@dataclass(frozen=True)
class Decoding:
    start: int                 # decoder_start_token_id
    eos: int | None            # None: every output runs to the graph's length
    pad: int                   # fills the positions after the prefix
    length: int                # the decoder graph's sequence length
    forced: tuple[int, ...] = ()  # tokens after the start one (Whisper: language, task)
    most: int | None = None       # stop after this many new tokens (None: the graph's length)
    follow: tuple[int, ...] | None = None  # feed these tokens, not the argmax (teacher forcing)


def _next(how: Decoding, out: list[int], token: int) -> int:
    """The token fed after `out`: the argmax, or the followed run's token at that step."""
    if how.follow is not None and len(out) <= len(how.follow):
        return how.follow[len(out) - 1]
    return token


def greedy(logits: Logits, how: Decoding, record: list[np.ndarray] | None = None) -> list[int]:
    """The generated tokens (without the start and forced tokens or eos): at most
    `how.length` in all; `record` gets each step's logits."""
    prefix, out = [how.start, *how.forced], []
    while True:
        ids = np.full((1, how.length), how.pad, np.int64)
        ids[0, :len(prefix)] = prefix
        row = logits(ids)[0, len(prefix) - 1]
        if record is not None:
            record.append(row)
        token = int(np.argmax(row))
        if token == how.eos and how.follow is None:
            return out
        out.append(token)
        if len(prefix) == how.length or len(out) == how.most or \
                (how.follow is not None and len(out) >= len(how.follow)):
            return out
        prefix.append(_next(how, out, token))


def _token(cx: Context, name: str) -> int | None:
    """A special token id from config.json, else from its decoder's (or text model's) config."""
    value = cx.info.get(name)
    for part in ("decoder", "text_config"):
        if value is None:
            value = (cx.info.get(part) or {}).get(name)
    if isinstance(value, list):  # several eos ids: the first
        value = value[0] if value else None
    return None if value is None else int(value)


def decoding(cx: Context) -> Decoding:
    ids = next((s for s in cx.specs.get("decoder", []) if kind_of(s) in ("decoder_ids",
                                                                         "token_ids")), None)
    if cached(cx):  # the one-token decoder: its length is its cache's
        ids = next(s for s in cx.specs["decoder"] if s["name"] == "attention_mask")
        ids = {**ids, "shape": [1, ids["shape"][1] - 1]}
    if ids is None:
        raise EvalDataError(f"eval: {cx.task} needs an encoder and a decoder graph taking "
                            "input_ids; build the model's encoder-decoder export")
    start = start_token(cx.info)
    if start is None:
        raise EvalDataError("eval: config.json has no decoder_start_token_id (nor bos_token_id) "
                            "to start decoding from; add decoder_start_token_id to config.json")
    pad = _token(cx, "pad_token_id")
    mt = model_type_of(cx.info)
    end = _token(cx, mt.end_token if mt is not None else "eos_token_id")
    return Decoding(start, end, 0 if pad is None else pad,
                    int(ids["shape"][1]), forced_tokens(cx))


def forced_tokens(cx: Context) -> tuple[int, ...]:
    """The tokens a speech model's generation config forces after the start token: the
    language and task of a multilingual Whisper (English, transcribe), then no timestamps."""
    path = None if cx.checkpoint is None else cx.checkpoint / "generation_config.json"
    if path is None or not path.is_file():
        return ()
    gen = json.loads(path.read_text())
    forced = [int(t) for _, t in sorted(gen.get("forced_decoder_ids") or []) if t is not None]
    if gen.get("is_multilingual") and gen.get("lang_to_id") and gen.get("task_to_id"):
        forced = [gen["lang_to_id"].get("<|en|>"), gen["task_to_id"].get("transcribe")]
    if gen.get("no_timestamps_token_id") is not None:
        forced.append(int(gen["no_timestamps_token_id"]))
    return tuple(t for t in forced if t is not None)


def decoder_feed(cx: Context, ids: np.ndarray, states: np.ndarray, encoder: Feed) -> Feed:
    """The decoder graph's inputs: the padded ids, the encoder's states (cut to the graph's
    length) and, where it takes one, the encoder's attention mask."""
    feed: Feed = {}
    for spec in cx.specs["decoder"]:
        kind = kind_of(spec)
        if kind in ("decoder_ids", "token_ids"):
            feed[spec["name"]] = ids
        elif kind == "encoder_hidden_states":
            feed[spec["name"]] = states[:, :int(spec["shape"][1])]
        elif kind == "encoder_attention_mask":
            mask = next((v for k, v in encoder.items() if "attention_mask" in k), None)
            feed[spec["name"]] = mask if mask is not None else \
                np.ones(spec["shape"], np.int64)
        else:
            raise EvalDataError(f"eval: the decoder's input {spec['name']!r} is not one greedy "
                                "decoding feeds; evaluate with verify instead (eval=none)")
    return feed


def cached(cx: Context) -> bool:
    """Whether the decoder is the one-token decoder over a static cache (with a cross graph)."""
    return any(s["name"] == "past_key_values.0.key" for s in cx.specs.get("decoder", []))


def cached_greedy(graphs: dict[str, Forward], states: np.ndarray, encoder: Feed, cx: Context,
                  how: Decoding, record: list[np.ndarray] | None = None) -> list[int]:
    """Greedy decoding with the cached decoder: the cross graph once, then one decoder call
    per token, its keys and values written into the next cache slot."""
    specs = {s["name"]: s for s in cx.specs["decoder"]}
    width = int(cx.specs["cross"][0]["shape"][1])
    cross = graphs["cross"]({"encoder_hidden_states": states[:, :width]})
    past = {n: np.zeros(s["shape"], np.float32) for n, s in specs.items()
            if n.startswith("past_key_values.")}
    prefix, out, seen = [how.start, *how.forced], [], 0
    mask_in = next((v for k, v in encoder.items() if "attention_mask" in k), None)
    slots = int(specs["attention_mask"]["shape"][1]) - 1
    while seen < min(how.length, slots):
        mask = np.zeros((1, slots + 1), np.int64)
        mask[0, :seen], mask[0, -1] = 1, 1
        token = prefix[seen] if seen < len(prefix) else _next(how, out, out[-1])
        feed = {"input_ids": np.array([[token]], np.int64),
                "position_ids": np.array([[seen]], np.int64), "attention_mask": mask,
                **past, **cross}
        if "encoder_attention_mask" in specs:
            feed["encoder_attention_mask"] = mask_in if mask_in is not None else \
                np.ones(specs["encoder_attention_mask"]["shape"], np.int64)
        got = graphs["decoder"](feed)
        for name, buffer in past.items():
            buffer[:, :, seen] = got[name.replace("past_key_values.", "present.")][:, :, 0]
        seen += 1
        if seen < len(prefix):
            continue
        row = got[_logits(cx)][0, -1]
        if record is not None:
            record.append(row)
        token = int(np.argmax(row))
        if token == how.eos and how.follow is None:
            break
        out.append(token)
        if len(out) == how.most or (how.follow is not None and len(out) >= len(how.follow)):
            break
    return out


def generate(graphs: dict[str, Forward], encoder: Feed, cx: Context, how: Decoding,
             record: list[np.ndarray] | None = None) -> list[int]:
    """One row's generated tokens: the encoder once, the decoder once per token; `record`
    gets each step's logits."""
    outputs = graphs["encoder"](encoder)
    states = outputs.get(ENCODER_OUTPUTS[0], next(iter(outputs.values())))
    if cached(cx):
        return cached_greedy(graphs, states, encoder, cx, how, record)
    return greedy(lambda ids: graphs["decoder"](decoder_feed(cx, ids, states, encoder))
                  [_logits(cx)], how, record)


def _logits(cx: Context) -> str:
    names = cx.outputs.get("decoder") or ["logits"]
    return "logits" if "logits" in names else names[0]


class Generation(Evaluator):
    tasks = ("text2text-generation", "image-to-text")

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        role = "image" if cx.task == "image-to-text" else "text"
        for i, row in enumerate(rows):
            if row.get(role) is None:
                raise EvalDataError(f"eval.dataset.columns.{role}: row {i} has no {role}; map "
                                    f"eval.dataset.columns.{role} to the column of inputs")
        return Prepared([modality_feed(cx, {role: r[role]}) for r in rows], rows)

    def predictions(self, graphs: dict[str, Forward], prepared: Prepared, cx: Context,
                    progress: Callable[[int], None]) -> list[Any]:
        how, tok = decoding(cx), textscore.tokenizer(cx.checkpoint)
        out = []
        for i, feed in enumerate(prepared.feeds):
            ids = generate(graphs, feed, cx, how)
            out.append(textscore.ids_text(ids) if tok is None else
                       str(tok.decode(ids, skip_special_tokens=True)))
            progress(i)
        return out

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return textscore.references(prepared.rows, "target")

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        return {"bleu": textscore.bleu(predictions, truth),
                "cer": textscore.error_rates(predictions, truth)["cer"],
                "exact_match": textscore.exact_match(predictions, truth)}

    def notes(self, cx: Context) -> list[str]:
        return [] if textscore.tokenizer(cx.checkpoint) is not None else \
            [textscore.NO_TOKENIZER]
