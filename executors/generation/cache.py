"""The static key/value cache protocol, host side.

A graph over a static cache takes one buffer per layer and part (`past_key_values.{i}.key`,
[1, heads, slots, head width]) and a mask over the slots plus the token itself; it gives back
the new tokens' entries only (`present.{i}.key`), which the host writes into the next slots:
no graph scatters and every shape is fixed (planner/models/roles.py declares the names). A
layer that keeps a recurrent state is fed its states whole and gives them back updated, and
the host keeps the ones given back (executors/generation/recurrent.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from planner.models.roles import CACHE


class StaticCache:
    """The host's buffers for one graph's past inputs, and how many slots hold entries."""

    def __init__(self, specs: list[dict[str, Any]]) -> None:
        by_name = {s["name"]: s for s in specs}
        self.shapes = {n: s["shape"] for n, s in by_name.items() if CACHE.is_past(n)}
        self.slots = int(by_name["attention_mask"]["shape"][1]) - 1
        self.reset()

    def reset(self) -> None:
        self.buffers = {n: np.zeros(shape, np.float32) for n, shape in self.shapes.items()}
        self.seen = 0

    @property
    def full(self) -> bool:
        return self.seen >= self.slots

    @property
    def recurrent(self) -> bool:
        """Whether the graphs carry a recurrent layer's states besides keys and values."""
        return any(CACHE.is_state(n) for n in self.buffers)

    def write(self, out: dict[str, np.ndarray], count: int = 1, last: bool = False) -> None:
        """Write the first `count` new entries a graph gave back into the next slots (`last`:
        the one token's entry, which comes last, after the past a graph of a free past gives
        back with it); a recurrent layer's states given back replace the fed ones."""
        for name, buffer in self.buffers.items():
            if CACHE.is_state(name):
                buffer[...] = out[CACHE.present_of(name)]
            elif count == 1:
                buffer[:, :, self.seen] = out[CACHE.present_of(name)][:, :, -1 if last else 0]
            else:
                buffer[:, :, self.seen:self.seen + count] = \
                    out[CACHE.present_of(name)][:, :, :count]
        self.seen += count

    def window_feed(self, tokens: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray]:
        """A prompt window's inputs: its tokens (or embeddings, `count` of them real, the rest
        padding), positions, mask and the buffers."""
        width = next(iter(tokens.values())).shape[1]
        return {**tokens, "position_ids": window_positions(self.seen, width, self.slots),
                "attention_mask": window_mask(self.seen, count, width, self.slots),
                **self.buffers}

    def step_feed(self, token_input: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A one-token step's cache inputs: its token (or embedding), position, mask, buffers:
        a window of one."""
        return self.window_feed(token_input, 1)


def step_mask(seen: int, slots: int) -> np.ndarray:
    return window_mask(seen, 1, 1, slots)


def window_mask(seen: int, count: int, width: int, slots: int) -> np.ndarray:
    """The mask of a window of `width` tokens, the first `count` real, after `seen` filled
    slots: [1, slots + width], the filled slots then the real tokens."""
    mask = np.zeros((1, slots + width), np.int64)
    mask[0, :seen] = 1
    mask[0, slots:slots + count] = 1
    return mask


def window_positions(seen: int, width: int, slots: int) -> np.ndarray:
    """A window's positions from `seen` on, its padding's held at the last slot's position
    (a position table has no row past it)."""
    return np.minimum(np.arange(seen, seen + width, dtype=np.int64), slots - 1)[None]


def own_layers(layers: Any) -> list[Any]:
    """A transformers cache's layers that hold entries of their own: not those that reuse an
    earlier layer's keys and values (Gemma 3n's and Gemma 4's last layers), nor those that
    cache nothing (a mixture-of-experts or MLP-only layer)."""
    from transformers.cache_utils import DummyLayer

    return [layer for layer in layers if not isinstance(layer, DummyLayer)]


def layer_entries(layers: Any) -> Iterator[tuple[int, str, Any]]:
    """(own layer index, part, tensor) of what a transformers cache's layers hold, in the
    graphs' order: a layer's keys and values (parts `key`, `value`), then the states of a
    layer that keeps a recurrent state (`conv.{i}`, `recurrent.{i}`: transformers'
    LinearAttention cache layers; a hybrid layer holds both)."""
    from executors.generation.recurrent import is_recurrent, states_of

    for i, layer in enumerate(own_layers(layers)):
        if not is_recurrent(layer) or getattr(layer, "keys", None) is not None:
            yield from ((i, part, value) for part, value in
                        zip(CACHE.parts, (layer.keys, layer.values), strict=True))
        yield from ((i, f"{kind}.{index}", value) for kind, index, value in states_of(layer))


def static_entries(layers: Any, seen: int, shape: list[int] | None = None,
                   prefix: str = CACHE.past) -> dict[str, np.ndarray]:
    """A transformers cache's layers (`.keys`, `.values` tensors) as the static buffers a graph
    reads: each layer's first `seen` entries in slots 0 .. seen - 1 of a buffer of `shape`'s
    slots (axis 2) and the layer's own heads and width (Gemma 4's differ by layer); the
    tensor's own shape when None: the cross keys and values, which are read whole). A layer
    that reuses an earlier one's entries (Gemma 3n's last layers) has no buffers; a recurrent
    layer's states are fed as they are."""
    feed = {}
    for i, part, value in layer_entries(layers):
        name = f"{prefix}.{i}.{part}"
        if shape is None or part not in CACHE.parts:
            feed[name] = value.float().numpy()
            continue
        buf = np.zeros([*value.shape[:2], shape[2], *value.shape[3:]], np.float32)
        if seen:
            buf[:, :, :seen] = value[:, :, :seen].float().numpy()
        feed[name] = buf
    return feed


def unread_indexer_slots(layer: Any, slots: int) -> None:
    """A sparse attention's layer (transformers' indexed layers: DeepSeek-V3.2, GLM-MoE-DSA,
    Mistral Large 4) scores its indexer keys against the mask of the slots and the window; the
    static cache does not carry those keys, so its first indexer keys are `slots` zeros before
    the window's own. What they score does not matter: the plan keeps the slots and the window
    within index_topk, so every one of them is chosen, as PyTorch chooses them all."""
    update = getattr(layer, "update_indexer", None)
    if update is None or getattr(layer, "is_indexer_initialized", True):
        return

    def after_slots(states: Any) -> Any:
        if not layer.is_indexer_initialized:
            update(states.new_zeros(states.shape[0], slots, states.shape[-1]))
        return update(states)

    layer.update_indexer = after_slots
