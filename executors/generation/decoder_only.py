"""A causal LM's generation: the prefill graph reads the prompt a window at a time (each
right-padded to its length, after the slots the earlier windows filled) and its present
entries fill the next cache slots; each decode step reads one token, its position and the
cache, and its present entries are written into the next slot. A model whose layers keep a
recurrent state reads a whole first window through the prefill graph and the rest of the
prompt token by token through the decode graph: a padded position would run through the
recurrent update (a state-space or linear-attention step does not skip it as a masked
attention slot is), and some of transformers' recurrent forwards over several tokens start
from a zero state whatever state they are fed (Mamba's), while a step is the prompt's own
next step. PyTorch's reference steps the checkpoint with its own cache; both run the one
greedy loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from executors.generation import loop
from executors.generation.cache import StaticCache

Forward = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class LMGraphs(loop.PromptStepper):
    """The prefill and decode graphs (as forwards: named inputs -> named outputs) and the cache
    between their calls; the decode graph's input specs give the cache geometry."""

    def __init__(self, prefill: Forward, decode: Forward, prefill_specs: list[dict[str, Any]],
                 decode_specs: list[dict[str, Any]], host: dict[str, Forward] | None = None
                 ) -> None:
        self.prefill_forward, self.decode_forward = prefill, decode
        self.host = host or {}  # "embeddings" / "head" the host runs (export.on_host)
        self.cache = StaticCache(decode_specs)
        self.context = self.cache.slots
        self.prefill_length = int(next(s["shape"][1] for s in prefill_specs
                                       if s["name"] == "position_ids"))

    @property
    def full(self) -> bool:
        return self.cache.full

    def prompt(self, ids: list[int]) -> np.ndarray:
        """Read the prompt into the cache, a window at a time; the logits at every prompt
        position [n, vocab] (row i predicts token i + 1)."""
        self.cache.reset()
        rows: list[np.ndarray] = []
        while self._windowed(len(ids) - self.cache.seen):
            rows += self._window(ids[self.cache.seen:self.cache.seen + self.prefill_length])
        for token in ids[self.cache.seen:]:
            rows.append(self.step(token))
        return np.stack(rows)

    def _windowed(self, left: int) -> bool:
        """Whether the prefill graph reads the prompt's next window (`left` tokens to read): any
        part of it; for a model with recurrent states only a whole first window (from the
        second on, some of transformers' recurrent forwards over several tokens restart their
        scan from a zero state instead of the one fed: Mamba's, Falcon-Mamba's)."""
        if self.cache.recurrent:
            return self.cache.seen == 0 and left >= self.prefill_length
        return left > 0

    def _window(self, ids: list[int]) -> list[np.ndarray]:
        """One window of the prompt through the prefill graph; its tokens' logits."""
        if self.cache.seen + len(ids) > self.context:
            raise loop.cache_full(self.context)
        tokens = np.zeros((1, self.prefill_length), np.int64)
        tokens[0, :len(ids)] = ids
        out = self._logits(self.prefill_forward(
            self.cache.window_feed(self._tokens(tokens), len(ids))))
        self.cache.write(out, len(ids))
        return [out["logits"][0, i] for i in range(len(ids))]

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

    def step(self, token: int) -> np.ndarray:
        """Decode one token at the next position; its logits for the token after it."""
        if self.cache.full:
            raise loop.cache_full(self.context)
        out = self._logits(self.decode_forward(
            self.cache.step_feed(self._tokens(np.array([[token]], np.int64)))))
        self.cache.write(out, last=True)
        return out["logits"][0, -1]



class PrefixGraph(loop.PromptStepper):
    """A causal LM's one graph on the whole prefix (a forward that keeps no cache): every new
    token reruns it on all the tokens so far, from position 0, right-padded to the graph's
    length where that is fixed (the padding masked, and after the tokens a causal model reads),
    and reads the logits at the last token."""

    def __init__(self, forward: Forward, length: int | None, context: int) -> None:
        self.forward = forward
        self.length = length  # the graph's fixed token axis (None: free, fed unpadded)
        self.context = length or context
        self.ids: list[int] = []

    @property
    def full(self) -> bool:
        return len(self.ids) >= self.context

    def prompt(self, ids: list[int]) -> np.ndarray:
        """The logits at every prompt position [n, vocab] (row i predicts token i + 1)."""
        if len(ids) > self.context:
            raise full_graph(self.context)
        self.ids = list(ids)
        return self._logits()

    def step(self, token: int) -> np.ndarray:
        if self.full:
            raise full_graph(self.context)
        self.ids.append(token)
        return self._logits()[-1]

    def _logits(self) -> np.ndarray:
        n = len(self.ids)
        tokens = np.zeros((1, self.length or n), np.int64)
        tokens[0, :n] = self.ids
        mask = np.zeros_like(tokens)
        mask[0, :n] = 1
        return self.forward({"input_ids": tokens, "attention_mask": mask})["logits"][0, :n]


def full_graph(length: int) -> IndexError:
    """The error the prefix graph's runner raises when a token would not fit its length."""
    return IndexError(f"the graph's {length} token positions are full")


class TorchPrefixLM:
    """PyTorch's side of a causal LM that keeps no cache: the checkpoint's forward on the whole
    prefix at each step, as transformers' generate runs such a model."""

    def __init__(self, model: Any) -> None:
        self.model, self.ids = model, []

    def _last(self) -> np.ndarray:
        import torch

        from executors.generation.modules import prefix_lm  # the forward its graph traces

        out = prefix_lm(self.model, {"input_ids": torch.tensor([self.ids])})
        return out.logits[0, -1].float().numpy()

    def greedy(self, ids: list[int], new_tokens: int,
               eos: set[int] | None = None) -> loop.Generated:
        import torch

        def step(token: int) -> np.ndarray:
            self.ids.append(token)
            return self._last()

        self.ids = list(ids)
        with torch.no_grad():
            return loop.greedy(self._last, step, new_tokens, eos or set())


class NoContinuation(ValueError):
    """PyTorch's own forward does not continue from its cache one token at a time."""


class TorchLM:
    """PyTorch's side: the checkpoint stepped with a dynamic cache of its config (the cache its
    graphs are traced with: a BERT-like decoder left to make its own makes an encoder-decoder
    cache, whose self-attention half holds the same entries), at the positions
    transformers' generate gives (0, 1, ... from the first token, for a forward that takes
    position ids: a model that would count from its padding index, as RoBERTa's, gets them
    too, so the prompt and the steps agree)."""

    def __init__(self, model: Any) -> None:
        from executors.generation.modules import takes_positions

        self.model, self.cache, self.seen = model, None, 0
        self.positions = takes_positions(model)

    def prompt(self, ids: list[int]) -> np.ndarray:
        import torch

        from executors.generation.modules import cache_kwargs, dynamic_cache, returned_cache

        at = {"position_ids": torch.arange(len(ids))[None]} if self.positions else {}
        out = self.model(input_ids=torch.tensor([ids]),
                         **cache_kwargs(self.model, dynamic_cache(self.model)),
                         use_cache=True, return_dict=True, **at)
        self.cache, self.seen = returned_cache(out), len(ids)
        return out.logits[0, -1].float().numpy()

    def step(self, token: int) -> np.ndarray:
        import torch

        from executors.generation.modules import cache_kwargs, returned_cache

        at = {"position_ids": torch.tensor([[self.seen]])} if self.positions else {}
        try:
            out = self.model(input_ids=torch.tensor([[token]]),
                             **cache_kwargs(self.model, self.cache), use_cache=True,
                             return_dict=True, **at)
        except RuntimeError as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise NoContinuation(
                f"{type(self.model).__name__}'s forward fails on one token over the cache its "
                f"prompt filled ({first}): it reads the whole sequence at every step, and the "
                "decode graph steps one token over the cache; this model cannot be built as "
                "prefill and decode graphs (export.shapes.decoder_cache=false builds it as one "
                "graph run on the whole prefix for each new token)") from exc
        self.cache, self.seen = returned_cache(out), self.seen + 1
        return out.logits[0, -1].float().numpy()

    def greedy(self, ids: list[int], new_tokens: int,
               eos: set[int] | None = None) -> loop.Generated:
        import torch

        with torch.no_grad():
            return loop.greedy(lambda: self.prompt(ids), self.step, new_tokens, eos or set())
