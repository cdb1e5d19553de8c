"""Greedy generation with a causal LM's two graphs: the host side of the static key/value cache.

The prefill graph reads the prompt (right-padded to its length; a longer prompt's remaining
tokens go through the decode graph one at a time) and its present keys and values fill the
first cache slots; each decode step reads one token, its position and the cache, and its
present is written into the next slot. Generation stops at an end-of-sequence token, after
`new_tokens`, or when the cache is full (`context_length` slots)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BUNDLE = "bundle.json"


@dataclass
class Generated:
    tokens: list[int]
    logits: list[np.ndarray] = field(default_factory=list)  # per generated token, [vocab]
    stopped: str = "new_tokens"  # new_tokens | eos | context
    first_token_s: float = 0.0   # the prompt's pass: time to the first token
    decode_s: list[float] = field(default_factory=list)  # each decode step

    @property
    def tokens_per_s(self) -> float | None:
        return len(self.decode_s) / sum(self.decode_s) if self.decode_s else None


Forward = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def session_forward(session: Any) -> Forward:
    names = [o.name for o in session.get_outputs()]
    return lambda feed: dict(zip(names, session.run(names, feed), strict=True))


class LMRunner:
    """The two graphs (as forwards: named inputs -> named outputs) and the cache buffers
    between their calls; the graphs' input specs give the cache geometry."""

    def __init__(self, prefill: Forward, decode: Forward, prefill_specs: list[dict[str, Any]],
                 decode_specs: list[dict[str, Any]], host: dict[str, Forward] | None = None
                 ) -> None:
        self.prefill_forward, self.decode_forward = prefill, decode
        self.host = host or {}  # "embeddings" / "head" the host runs (export.on_host)
        specs = {s["name"]: s for s in decode_specs}
        self.context = int(specs["attention_mask"]["shape"][1]) - 1
        self.past_shapes = {n: s["shape"] for n, s in specs.items()
                            if n.startswith("past_key_values.")}
        self.prefill_length = int(next(s["shape"][1] for s in prefill_specs
                                       if s["name"] == "attention_mask"))
        self.reset()

    def reset(self) -> None:
        self.cache = {n: np.zeros(shape, np.float32) for n, shape in self.past_shapes.items()}
        self.seen = 0

    def prompt(self, ids: list[int]) -> np.ndarray:
        """Read the prompt into the cache; the logits at every prompt position [n, vocab]
        (row i predicts token i + 1)."""
        self.reset()
        first = ids[:self.prefill_length]
        n = len(first)
        tokens = np.zeros((1, self.prefill_length), np.int64)
        tokens[0, :n] = first
        feed = {**self._tokens(tokens),
                "attention_mask": (np.arange(self.prefill_length) < n).astype(np.int64)[None],
                "position_ids": np.arange(self.prefill_length, dtype=np.int64)[None]}
        out = self._logits(self.prefill_forward(feed))
        for name in self.past_shapes:
            self.cache[name][:, :, :n] = out[_present(name)][:, :, :n]
        self.seen = n
        rows = [out["logits"][0, i] for i in range(n)]
        for token in ids[n:]:
            rows.append(self.step(token))
        return np.stack(rows)

    def _tokens(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The graphs' token input: the ids, or their embeddings looked up on the host."""
        if "embeddings" not in self.host:
            return {"input_ids": ids}
        return {"inputs_embeds": self.host["embeddings"]({"input_ids": ids})["inputs_embeds"]}

    def _logits(self, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graphs' outputs with logits: from the host's head where the graphs end before it."""
        if "head" in self.host:
            out["logits"] = self.host["head"]({"hidden_states": out["hidden_states"]})["logits"]
        return out

    @property
    def full(self) -> bool:
        return self.seen >= self.context

    def step(self, token: int) -> np.ndarray:
        """Decode one token at the next position; its logits for the token after it."""
        if self.full:
            raise IndexError(f"the key/value cache is full ({self.context} tokens)")
        mask = np.zeros((1, self.context + 1), np.int64)
        mask[0, :self.seen], mask[0, -1] = 1, 1
        feed = {**self._tokens(np.array([[token]], np.int64)),
                "position_ids": np.array([[self.seen]], np.int64),
                "attention_mask": mask, **self.cache}
        out = self._logits(self.decode_forward(feed))
        for name in self.past_shapes:
            self.cache[name][:, :, self.seen] = out[_present(name)][:, :, 0]
        self.seen += 1
        return out["logits"][0, -1]

    def greedy(self, ids: list[int], new_tokens: int, eos: set[int] | None = None,
               forced: list[int] | None = None) -> Generated:
        """Greedy decoding; `forced` feeds those tokens instead of the argmax (teacher forcing:
        the logits at each step are then comparable with the run that chose them)."""
        start = time.perf_counter()
        logits = self.prompt(ids)[-1]
        got = Generated([], first_token_s=time.perf_counter() - start)

        def step(i: int, token: int) -> np.ndarray | None:
            if self.full:
                got.stopped = "context"
                return None
            begin = time.perf_counter()
            out = self.step(forced[i] if forced is not None and i < len(forced) else token)
            got.decode_s.append(time.perf_counter() - begin)
            return out

        return decode_greedily(got, logits, step, new_tokens, eos or set())


def _present(past_name: str) -> str:
    return past_name.replace("past_key_values.", "present.")


def eos_ids(folder: Path) -> set[int]:
    """The end-of-sequence ids a bundle's (or checkpoint's) generation config names."""
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if eos is not None:
                return set(eos) if isinstance(eos, list) else {int(eos)}
    return set()


def open_bundle(folder: Path, target: Any, provider_options: dict[str, Any],
                cache_dir: Path | None = None) -> LMRunner:
    """An LMRunner over a bundle folder written by the lm_bundle step."""
    from executors.runtime.adapters import adapter

    described = json.loads((folder / BUNDLE).read_text())
    graphs = described["graphs"]
    runtime = adapter(target)
    forwards = {g: session_forward(runtime.step_session(folder / graphs[g]["model"], target,
                                                        provider_options, cache_dir)[0])
                for g in ("prefill", "decode")}
    return LMRunner(forwards["prefill"], forwards["decode"], graphs["prefill"]["inputs"],
                    graphs["decode"]["inputs"], host_forwards(folder, described))


def host_forwards(folder: Path, described: dict[str, Any]) -> dict[str, Forward]:
    """Sessions on the host CPU for the layers a bundle places there (export.on_host)."""
    import onnxruntime as ort

    from executors.runtime.adapters import host_providers

    return {layer: session_forward(ort.InferenceSession(str(folder / name),
                                                        providers=host_providers()))
            for layer, name in described.get("host", {}).items()}


def torch_greedy(model: Any, ids: list[int], new_tokens: int,
                 eos: set[int] | None = None) -> Generated:
    """PyTorch's greedy decoding with the checkpoint's own cache (the reference)."""
    import torch

    got = Generated([])
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=True, return_dict=True)
        state = {"cache": out.past_key_values, "seen": len(ids)}

        def step(_i: int, token: int) -> np.ndarray:
            out = model(input_ids=torch.tensor([[token]]), past_key_values=state["cache"],
                        position_ids=torch.tensor([[state["seen"]]]), use_cache=True,
                        return_dict=True)
            state["cache"], state["seen"] = out.past_key_values, state["seen"] + 1
            return out.logits[0, -1].float().numpy()

        return decode_greedily(got, out.logits[0, -1].float().numpy(), step, new_tokens,
                               eos or set())


def decode_greedily(got: Generated, logits: np.ndarray,
                    step: Callable[[int, int], np.ndarray | None], new_tokens: int,
                    eos: set[int]) -> Generated:
    """The greedy loop both runners share: take the argmax, stop at an end token or after
    `new_tokens`, else `step(i, token)` gives the next logits (None: it cannot go on)."""
    for i in range(new_tokens):
        got.logits.append(logits)
        token = int(np.argmax(logits))
        got.tokens.append(token)
        if token in eos:
            got.stopped = "eos"
            break
        if i == new_tokens - 1:
            break
        following = step(i, token)
        if following is None:
            break
        logits = following
    return got
