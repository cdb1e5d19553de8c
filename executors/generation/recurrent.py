"""Causal LMs whose layers keep a recurrent state (state-space, convolution or linear-attention
layers, alone or beside attention): their graphs would drop that state between steps, since
the static cache carries keys and values only. transformers' cache classes say which layers."""

from __future__ import annotations

from typing import Any


class RecurrentState(Exception):
    """A causal LM with layers that keep a recurrent state, which no graph input carries."""


def recurrent_layers(cache: Any) -> dict[int, str]:
    """The layers of a transformers cache made for the model that keep a recurrent state (a
    convolution's or a state-space model's, alone or beside keys and values), with their
    cache class's name."""
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    return {i: type(layer).__name__ for i, layer in enumerate(cache.layers)
            if isinstance(layer, LinearAttentionCacheLayerMixin)}


def refuse_recurrent(model_name: str, cache: Any) -> None:
    """RecurrentState where a layer of the model's cache keeps a recurrent state."""
    recurrent = recurrent_layers(cache)
    if recurrent:
        kinds = sorted(set(recurrent.values()))
        raise RecurrentState(
            f"{model_name} keeps a recurrent state in layer"
            f"{'s' if len(recurrent) > 1 else ''} {', '.join(map(str, recurrent))} "
            f"(transformers' {', '.join(kinds)}: convolution or state-space states), which "
            "the static key/value cache does not carry from one step to the next")
