"""The cached decoder's samples, from the real generation loop: the encoder's states on a
shipped sentence (or photograph, or synthesized speech), then PyTorch's own greedy decoding
with its cache for 0 .. MAX_STEPS - 1 tokens; its self-attention keys and values written into
the static slots (the empty ones masked), its cross-attention keys and values, the token it
chose and its position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from executors.samples import media
from executors.samples.text import Got, encoder_inputs, sentences, tokenizer

S2S_KINDS = ("s2s_step_ids", "s2s_positions", "s2s_mask", "s2s_past", "s2s_cross")
MAX_STEPS = 8


def step_feeds(wanted: dict[str, dict[str, Any]], specs: list[dict[str, Any]], n: int,
               split: str, source: Path, ckpt: Path | None, rng: np.random.Generator) -> Got:
    import torch

    from executors.runtime import torchmodel

    model, _ = torchmodel.load(source)
    tok = tokenizer(ckpt)
    lines, pool = sentences(split), media.views(split)
    slots = wanted["s2s_mask"]["shape"][1] - 1
    enc_seq = next(s["shape"][2] for s in specs if s.get("kind") == "s2s_cross")
    feeds = []
    for i in range(n):
        enc_in, enc_mask = encoder_inputs(model, tok, [lines[i % len(lines)]], enc_seq, pool,
                                          i, 1, ckpt, rng)
        with torch.no_grad():
            feed = _after(model, enc_in, enc_mask, min((i * 3) % MAX_STEPS, slots - 1), slots,
                          "encoder_attention_mask" in {s["name"] for s in specs})
        feeds.append(feed)
    return Got(feeds, "encoder states of shipped inputs; caches of PyTorch's greedy decoding")


def _after(model: Any, enc_in: dict[str, np.ndarray], enc_mask: np.ndarray, steps: int,
           slots: int, masked: bool) -> dict[str, np.ndarray]:
    import torch

    from executors.runtime import s2sgraphs
    from executors.runtime.torchmodel import encoder_of

    encoder = {k: torch.from_numpy(v) for k, v in enc_in.items()}
    states = encoder_of(model)(**encoder, return_dict=True).last_hidden_state
    source_mask = torch.from_numpy(enc_mask) if masked else None
    token = s2sgraphs.start(model)
    cache = None
    for _t in range(steps):
        out = s2sgraphs.decode(model, states, torch.tensor([[token]]), source_mask,
                               past_key_values=cache)
        cache, token = out.past_key_values, int(out.logits[0, -1].argmax())
    if cache is None:  # the first step: the cross keys and values from a pass on the start
        cache = s2sgraphs.decode(model, states, torch.tensor([[token]]),
                                 source_mask).past_key_values
        seen = 0
    else:
        seen = steps
    mask = np.zeros((1, slots + 1), np.int64)
    mask[0, :seen], mask[0, -1] = 1, 1
    feed = {"input_ids": np.array([[token]], np.int64),
            "position_ids": np.array([[seen]], np.int64), "attention_mask": mask}
    if masked:
        feed["encoder_attention_mask"] = enc_mask
    for i, (mine, theirs) in enumerate(zip(cache.self_attention_cache.layers,
                                           cache.cross_attention_cache.layers, strict=True)):
        for part in ("key", "value"):
            buf = np.zeros((1, *getattr(mine, part + "s").shape[1:2], slots,
                            getattr(mine, part + "s").shape[3]), np.float32)
            if seen:
                buf[:, :, :seen] = getattr(mine, part + "s").numpy()[:, :, :seen]
            feed[f"past_key_values.{i}.{part}"] = buf
            feed[f"cross.{i}.{part}"] = getattr(theirs, part + "s").numpy()
    return feed
