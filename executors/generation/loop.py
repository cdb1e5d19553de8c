"""The greedy loop every generation runs: `modelplan generate`, verify_generation (free-running
for PyTorch, teacher-forced for the deliverable), eval, and the calibration samples of the
graphs over a cache.

A stepper gives the logits after its prompt (`first`) and after each fed token (`step`), or
None when it cannot go on (its cache or its graph's length is full). The loop takes the argmax,
stops at an end token, at the token cap or when the stepper is full, and feeds either its own
choice or, teacher-forced, the token of a run it follows (whose length then caps it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

Logits = np.ndarray  # [vocab]: the scores of the next token


@dataclass
class Generated:
    tokens: list[int]
    logits: list[np.ndarray] = field(default_factory=list)  # per generated token, [vocab]
    stopped: str = "new_tokens"  # new_tokens | eos | context
    first_token_s: float = 0.0   # the prompt's pass: time to the first token
    decode_s: list[float] = field(default_factory=list)  # each step after it

    @property
    def tokens_per_s(self) -> float | None:
        return len(self.decode_s) / sum(self.decode_s) if self.decode_s else None

    def without_end(self) -> list[int]:
        """The tokens without the end token it stopped at."""
        return self.tokens[:-1] if self.stopped == "eos" else list(self.tokens)


def cache_full(context: int) -> IndexError:
    """The error a runner raises when a token would not fit its cache's `context` slots."""
    return IndexError(f"the key/value cache is full ({context} tokens)")


class PromptStepper:
    """A causal LM's graphs as a stepper: `prompt(ids)` reads a prompt into the cache and gives
    the logits at each of its positions, `step(token)` one token's, `full` once the cache is;
    `greedy` runs them through the loop (modelplan's pair, or what onnxruntime-genai runs)."""

    full: bool

    def prompt(self, ids: list[int]) -> np.ndarray:
        raise NotImplementedError

    def step(self, token: int) -> Logits:
        raise NotImplementedError

    def greedy(self, ids: list[int], new_tokens: int, eos: set[int] | None = None,
               follow: list[int] | None = None) -> Generated:
        return greedy(lambda: self.prompt(ids)[-1],
                      lambda token: None if self.full else self.step(token),
                      new_tokens, eos or set(), follow)


def greedy(first: Callable[[], Logits | None], step: Callable[[int], Logits | None],
           new_tokens: int | None, eos: set[int] | frozenset[int] = frozenset(),
           follow: Sequence[int] | None = None,
           banned: Callable[[int], Sequence[int]] | None = None) -> Generated:
    """Greedy decoding: at most `new_tokens` tokens (None: until an end token or a full
    stepper), the end token kept in `tokens`; `follow` feeds its tokens instead of the argmax
    (teacher forcing: each step's logits then compare with the run that chose them); `banned`
    names the tokens never chosen as the i-th new one (a generation config's suppressed
    tokens; the logits kept are the stepper's own)."""
    cap = new_tokens
    if follow is not None:
        cap = len(follow) if cap is None else min(cap, len(follow))
    start = time.perf_counter()
    logits = first()
    got = Generated([], first_token_s=time.perf_counter() - start)
    if logits is None:
        got.stopped = "context"
        return got
    i = 0
    while cap is None or i < cap:
        got.logits.append(logits)
        token = _choice(logits, banned(i) if banned is not None else ())
        got.tokens.append(token)
        if token in eos:
            got.stopped = "eos"
            break
        if cap is not None and i == cap - 1:
            break
        begin = time.perf_counter()
        following = step(follow[i] if follow is not None else token)
        if following is None:
            got.stopped = "context"
            break
        got.decode_s.append(time.perf_counter() - begin)
        logits = following
        i += 1
    return got


def _choice(logits: Logits, banned: Sequence[int]) -> int:
    if not len(banned):
        return int(np.argmax(logits))
    scores = np.array(logits, dtype=np.float64)
    scores[[t for t in banned if 0 <= t < scores.shape[-1]]] = -np.inf
    return int(np.argmax(scores))
