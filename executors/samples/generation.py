"""The samples of the graphs over a static key/value cache, from the real generation loop
(executors/generation/: PyTorch's side of it):

* A causal LM: shipped sentences through the model's tokenizer (seeded random token ids when it
  has none) are the prompts; the prefill graph gets a window of a prompt right-padded to its
  length: every other sample a prompt's first window on the empty cache, the others a later
  window of the prompts joined up to the context, after the keys and values PyTorch cached of
  the windows before it (so the past's encodings see real entries at the positions a long
  prompt reaches); the decode graph gets a step of PyTorch's own greedy generation on a
  prompt: the token it chose, its position, and the keys and values PyTorch cached so far
  written into the static cache slots, the empty slots masked.
* An encoder-decoder's cached decoder: the encoder's states on a shipped sentence (or
  photograph, or synthesized speech), then PyTorch's own greedy decoding with its cache for
  0 .. MAX_STEPS - 1 tokens; its self-attention keys and values written into the static slots
  (the empty ones masked), its cross-attention keys and values, the token it chose and its
  position. A decoder over a free past (onnxruntime-genai's Whisper layout) is fed the keys
  and values of the tokens seen so far (at least one), nothing after them."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np

from executors.generation import cache as static_cache
from executors.generation import loop, modules
from executors.generation.decoder_only import NoContinuation, TorchLM
from executors.samples import media
from executors.samples.text import Got, encoder_inputs, sentences, tokenizer
from planner.models.roles import CACHE

LM_KINDS = ("lm_prompt_ids", "lm_prompt_embeds", "lm_prompt_mask", "lm_prompt_positions",
            "lm_step_ids", "lm_step_embeds", "lm_step_positions", "lm_step_mask", "lm_past")
S2S_KINDS = ("s2s_step_ids", "s2s_positions", "s2s_mask", "s2s_past", "s2s_cross")
MAX_STEPS = 8  # decode samples are taken after 0 .. MAX_STEPS - 1 generated tokens


def prompts(n: int, split: str, ckpt: Path | None, vocab: int, rng: np.random.Generator,
            longest: int) -> tuple[list[list[int]], str]:
    """`n` prompts as token id lists of at most `longest` tokens, and where they came from."""
    tok = tokenizer(ckpt)
    lines = sentences(split)
    out = []
    for i in range(n):
        if tok is not None:
            ids = list(tok(lines[i % len(lines)])["input_ids"])
        else:
            ids = [int(t) for t in rng.integers(0, vocab, size=int(rng.integers(4, 24)))]
        out.append(ids[:longest] or [0])
    origin = "sentences via the model's tokenizer" if tok is not None else \
        "random token ids (the model has no tokenizer)"
    return out, origin


def lm_feeds(wanted: dict[str, dict[str, Any]], specs: list[dict[str, Any]], n: int,
             split: str, source: Path, ckpt: Path | None, rng: np.random.Generator) -> Got:
    """The feeds from PyTorch's run of the checkpoint: as saved when that is bf16 (no fp32 copy
    of its weights, made beside the stored ones while loading), else as fp32; fp32 also when a
    bf16 run fails (an op PyTorch's CPU lacks). The graphs read the caches as fp32."""
    from executors.runtime import torchmodel

    saved = torchmodel.saved_narrow(source)
    if saved is not None:
        state = rng.bit_generator.state
        try:
            return _lm_feeds(torchmodel.load(source, saved)[0], wanted, specs, n, split, ckpt,
                             rng)
        except (RuntimeError, NoContinuation):  # (a kernel missing on the one-token path)
            rng.bit_generator.state = state
        gc.collect()  # the bf16 model, out of the failure's frames now: gone before fp32 loads
    return _lm_feeds(torchmodel.load(source)[0], wanted, specs, n, split, ckpt, rng)


def _lm_feeds(model: Any, wanted: dict[str, dict[str, Any]], specs: list[dict[str, Any]],
              n: int, split: str, ckpt: Path | None, rng: np.random.Generator) -> Got:
    import torch

    vocab = int(model.config.get_text_config().vocab_size)
    if "lm_prompt_mask" in wanted:
        length = wanted["lm_prompt_positions"]["shape"][1]
        context = wanted["lm_prompt_mask"]["shape"][1] - length
        ids, origin = prompts(n, split, ckpt, vocab, rng, context)
        recurrent = any(CACHE.is_state(spec["name"]) for spec in specs)
        with torch.no_grad():
            feeds = [_embedded(model, wanted, _window_feed(
                model, wanted, specs, *_later_window(ids, i, length, context, recurrent),
                length, context)) for i in range(len(ids))]
        return Got(feeds, origin + "; every other one a later window, after PyTorch's cache of "
                   "the windows before it")
    context = wanted["lm_step_mask"]["shape"][1] - 1
    ids, origin = prompts(n, split, ckpt, vocab, rng, max(1, min(context - MAX_STEPS,
                                                                 context - 1)))
    with torch.no_grad():
        feeds = [_embedded(model, wanted, _step_feed(model, wanted, p, (i * 3) % MAX_STEPS,
                                                     context)) for i, p in enumerate(ids)]
    return Got(feeds, origin + "; caches of PyTorch's greedy generation")


IDS_FOR = {"lm_prompt_embeds": "lm_prompt_ids", "lm_step_embeds": "lm_step_ids"}


def _embedded(model: Any, wanted: dict[str, dict[str, Any]],
              feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Token ids looked up in the model's own embedding table, for graphs whose embeddings
    the host runs (export.on_host)."""
    import torch

    for kind, ids_kind in IDS_FOR.items():
        if kind in wanted:
            ids = feed.pop(ids_kind)
            table = model.get_input_embeddings()
            feed[wanted[kind]["name"]] = table(torch.from_numpy(ids)).float().numpy()
    return feed


def random_feeds(wanted: dict[str, dict[str, Any]], n: int, specs: list[dict[str, Any]],
                 rng: np.random.Generator) -> Got:
    """Without the torch model: random token ids and cache values, but masks and positions as
    generation makes them (a valid prefix; the decoded token after the filled slots)."""
    feeds = []
    for _ in range(n):
        if "lm_prompt_mask" in wanted:
            length = wanted["lm_prompt_positions"]["shape"][1]
            context = wanted["lm_prompt_mask"]["shape"][1] - length
            vocab = int(wanted["lm_prompt_ids"]["max"]) + 1 if "lm_prompt_ids" in wanted else 2
            seen = int(rng.integers(0, context - length + 1))
            ids = [int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, length + 1)))]
            feed = _prompt_feed(wanted, ids, length, seen, context)
            feed.update(_random_past(specs, rng))
            feeds.append(_random_embeds(wanted, feed, rng))
            continue
        context = wanted["lm_step_mask"]["shape"][1] - 1
        seen = int(rng.integers(1, context + 1))
        mask = np.zeros((1, context + 1), np.int64)
        mask[0, :seen], mask[0, -1] = 1, 1
        feed = {_name(wanted, "lm_step_ids"): rng.integers(
                    0, int(wanted["lm_step_ids"]["max"]) + 1 if "lm_step_ids" in wanted else 2,
                    size=(1, 1)),
                wanted["lm_step_positions"]["name"]: np.array([[seen]], np.int64),
                wanted["lm_step_mask"]["name"]: mask}
        feed.update(_random_past(specs, rng))
        feeds.append(_random_embeds(wanted, feed, rng))
    return Got(feeds, "random token ids and caches (no torch model here); generation's masks")


def _random_embeds(wanted: dict[str, dict[str, Any]], feed: dict[str, np.ndarray],
                   rng: np.random.Generator) -> dict[str, np.ndarray]:
    for kind, ids_kind in IDS_FOR.items():
        if kind in wanted:
            feed.pop(ids_kind)
            feed[wanted[kind]["name"]] = rng.normal(0.0, 0.02, size=wanted[kind]["shape"]
                                                    ).astype(np.float32)
    return feed


def _name(wanted: dict[str, dict[str, Any]], kind: str) -> str:
    """The input a kind feeds; the kind itself for ids that are embedded before feeding."""
    return wanted[kind]["name"] if kind in wanted else kind


def _random_past(specs: list[dict[str, Any]], rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {spec["name"]: rng.normal(0.0, 1.0, size=spec["shape"]).astype(np.float32)
            for spec in specs if spec.get("kind") == "lm_past"}


def _prompt_feed(wanted: dict[str, dict[str, Any]], ids: list[int], length: int, seen: int,
                 context: int) -> dict[str, np.ndarray]:
    """A prompt window's ids, positions and mask: `ids` right-padded to `length` after `seen`
    filled slots of `context` (the past itself is the caller's)."""
    tokens = np.zeros((1, length), np.int64)
    tokens[0, :len(ids)] = ids
    return {_name(wanted, "lm_prompt_ids"): tokens,
            wanted["lm_prompt_mask"]["name"]: static_cache.window_mask(seen, len(ids), length,
                                                                        context),
            wanted["lm_prompt_positions"]["name"]: static_cache.window_positions(seen, length,
                                                                                 context)}


def _later_window(ids: list[list[int]], i: int, length: int, context: int,
                  recurrent: bool) -> tuple[list[int], int]:
    """The prompt of sample `i` and where its window starts: the first window of prompt `i`
    for even `i` (and for a model with recurrent states, whose prefill graph reads only a
    first window); for odd `i` the prompts from `i` on joined up to the context, read from a
    later window (the second, third, ... in turn; the middle of a prompt shorter than one)."""
    if recurrent or i % 2 == 0:
        return ids[i], 0
    joined = [t for prompt in ids[i:] + ids[:i] for t in prompt][:context]
    windows = -(-len(joined) // length)
    if windows < 2:
        return joined, len(joined) // 2
    return joined, (i // 2 % (windows - 1) + 1) * length


def _window_feed(model: Any, wanted: dict[str, dict[str, Any]], specs: list[dict[str, Any]],
                 ids: list[int], seen: int, length: int, context: int) -> dict[str, np.ndarray]:
    """The prefill graph's inputs for the prompt `ids` read from its token `seen` on, after
    PyTorch's cache of its first `seen` tokens (where `seen` is 0: the empty slots and a
    recurrent layer's zero state, as transformers starts one)."""
    feed = _prompt_feed(wanted, ids[seen:seen + length], length, seen, context)
    if not seen:
        feed.update({s["name"]: np.zeros(s["shape"], np.float32) for s in specs
                     if CACHE.is_past(s["name"])})
        return feed
    torch_lm = TorchLM(model)
    torch_lm.prompt(ids[:seen])
    feed.update(static_cache.static_entries(torch_lm.cache.layers, seen,
                                            wanted["lm_past"]["shape"] if "lm_past" in wanted
                                            else None))
    return feed


def _step_feed(model: Any, wanted: dict[str, dict[str, Any]], ids: list[int], steps: int,
               context: int) -> dict[str, np.ndarray]:
    """The decode graph's inputs after `steps` greedy tokens on the prompt `ids` (the decoded
    token needs a slot too)."""
    torch_lm = TorchLM(model)
    got = loop.greedy(lambda: torch_lm.prompt(ids), torch_lm.step,
                      max(0, min(steps, context - 1 - len(ids))) + 1)
    seen = torch_lm.seen
    feed = {_name(wanted, "lm_step_ids"): np.array([[got.tokens[-1]]], np.int64),
            wanted["lm_step_positions"]["name"]: np.array([[seen]], np.int64),
            wanted["lm_step_mask"]["name"]: static_cache.step_mask(seen, context)}
    # every layer's buffers (one spec's shape each) and a recurrent layer's states (a model
    # whose layers all keep one has no buffers)
    feed.update(static_cache.static_entries(torch_lm.cache.layers, seen,
                                            wanted["lm_past"]["shape"] if "lm_past" in wanted
                                            else None))
    return feed


# -- an encoder-decoder's cached decoder ---------------------------------------------------------
def step_feeds(wanted: dict[str, dict[str, Any]], specs: list[dict[str, Any]], n: int,
               split: str, source: Path, ckpt: Path | None, rng: np.random.Generator) -> Got:
    import torch

    from executors.runtime import torchmodel

    model, _ = torchmodel.load(source)
    tok = tokenizer(ckpt)
    lines, pool = sentences(split), media.views(split)
    slots = wanted["s2s_past"]["shape"][2]
    enc_seq = next(s["shape"][2] for s in specs if s.get("kind") == "s2s_cross")
    free = "s2s_mask" not in wanted  # a free past: the tokens seen so far, at least one
    feeds = []
    for i in range(n):
        enc_in, enc_mask = encoder_inputs(model, tok, [lines[i % len(lines)]], enc_seq, pool,
                                          i, 1, ckpt, rng)
        steps = min(free + (i * 3) % MAX_STEPS, slots - 1)
        shape = wanted["s2s_past"]["shape"]
        with torch.no_grad():
            feed = _after(model, enc_in, enc_mask, steps, slots,
                          "encoder_attention_mask" in {s["name"] for s in specs},
                          [*shape[:2], steps, shape[3]] if free else shape)
        feeds.append(feed)
    return Got(feeds, "encoder states of shipped inputs; caches of PyTorch's greedy decoding")


class _TorchDecoder:
    """PyTorch's cached decoding on given encoder states, from the start token."""

    def __init__(self, model: Any, states: Any, source_mask: Any) -> None:
        self.model, self.states, self.source_mask, self.cache = model, states, source_mask, None

    def step(self, token: int) -> np.ndarray:
        import torch

        out = modules.decode(self.model, self.states, torch.tensor([[token]]), self.source_mask,
                             past_key_values=self.cache)
        self.cache = out.past_key_values
        return out.logits[0, -1].float().numpy()


def _after(model: Any, enc_in: dict[str, np.ndarray], enc_mask: np.ndarray, steps: int,
           slots: int, masked: bool, shape: list[int]) -> dict[str, np.ndarray]:
    import torch

    from executors.runtime.torchmodel import encoder_of

    encoder = {k: torch.from_numpy(v) for k, v in enc_in.items()}
    states = encoder_of(model)(**encoder, return_dict=True).last_hidden_state
    decoder = _TorchDecoder(model, states, torch.from_numpy(enc_mask) if masked else None)
    token = modules.start(model)
    if steps:
        got = loop.greedy(lambda: decoder.step(token), decoder.step, steps)
        token, seen = got.tokens[-1], steps
    else:  # the first step: the cross keys and values from a pass on the start
        decoder.step(token)
        seen = 0
    feed = {"input_ids": np.array([[token]], np.int64),
            "position_ids": np.array([[seen]], np.int64),
            "attention_mask": static_cache.step_mask(seen, slots)}
    if masked:
        feed["encoder_attention_mask"] = enc_mask
    feed.update(static_cache.static_entries(decoder.cache.self_attention_cache.layers, seen,
                                            shape))
    feed.update(static_cache.static_entries(decoder.cache.cross_attention_cache.layers, 0,
                                            None, CACHE.cross))
    return feed
