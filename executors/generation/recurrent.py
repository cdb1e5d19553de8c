"""Causal LMs whose layers keep a recurrent state (state-space, convolution or linear-attention
layers, alone or beside attention), as transformers' cache classes say: a LinearAttention cache
layer holds `number_of_states` convolution and/or recurrent states of fixed shape, which each
forward updates whatever the number of tokens.

The graphs carry them beside the static key/value buffers (planner/models/roles.py names
them): the decode graph is fed each state whole, `past_key_values.{layer}.{conv|recurrent}.{i}`,
and gives back the updated one, `present.{layer}.{conv|recurrent}.{i}`, which the host keeps
for the next step; the prefill graph takes and gives them back the same way (the host reads a
whole first window of the prompt through it, from zero states). Which
states a layer keeps, and their shapes, are read from a cache the model itself fills on one
token (`state_specs`), not from its config's fields.

A model whose layers all keep a state (no keys and values: Mamba's) reads its attention mask
over its input tokens only, a padding mask its mixers multiply their inputs by, while the
decode graph's covers the cache slots and the token: the step gives it the token's columns
(over the whole mask, the token would be broadcast over every slot and the states updated as
by that many tokens)."""

from __future__ import annotations

from typing import Any

from planner.models.roles import CACHE

STATE_KIND = "lm_state"  # the input specs' kind of a recurrent layer's state


class RecurrentState(Exception):
    """A causal LM with layers that keep a recurrent state its graphs cannot carry."""


def own_cache_class(model: Any) -> str | None:
    """The cache class a causal LM's forward takes where its own module defines it apart from
    transformers' Cache classes (xLSTM's xLSTMCache keeps its states in fields of its own):
    the graphs carry transformers' cache layers only. None where it takes theirs."""
    import inspect
    import typing

    from transformers.cache_utils import Cache

    params = inspect.signature(model.forward).parameters
    name = next((n for n in ("cache", "past_key_values") if n in params), None)
    if name is None:
        return None
    annotation = params[name].annotation
    own = [k for k in typing.get_args(annotation) or (annotation,)
           if isinstance(k, type) and k.__module__ == type(model).__module__
           and not issubclass(k, Cache)]
    return own[0].__name__ if own else None


def recurrent_layers(cache: Any) -> dict[int, str]:
    """The layers of a transformers cache made for the model that keep a recurrent state (a
    convolution's or a state-space model's, alone or beside keys and values), with their
    cache class's name."""
    return {i: type(layer).__name__ for i, layer in enumerate(cache.layers)
            if is_recurrent(layer)}


def is_recurrent(layer: Any) -> bool:
    """Whether a cache layer keeps a recurrent state (a LinearAttention layer, or a hybrid)."""
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    return isinstance(layer, LinearAttentionCacheLayerMixin)


def states_of(layer: Any) -> list[tuple[str, int, Any]]:
    """(kind, index, tensor) of the states a cache layer holds: a LinearAttention layer's
    initialized convolution and recurrent states (none for any other layer)."""
    if not is_recurrent(layer):
        return []
    conv, recurrent = CACHE.states
    out = []
    for i in range(layer.number_of_states):
        if layer.is_conv_states_initialized[i]:
            out.append((conv, i, layer.conv_states[i]))
        if layer.is_recurrent_states_initialized[i]:
            out.append((recurrent, i, layer.recurrent_states[i]))
    return out


def feed_states(layer: Any, states: dict[tuple[str, int], Any]) -> None:
    """Give a fresh LinearAttention cache layer the states a graph is fed, (kind, index) ->
    tensor, as its previous state: the forward then continues from them (its single-token
    path) and updates them. They are copied first: a forward updates its states in place,
    and a graph input stays as it was fed."""
    conv, _ = CACHE.states
    for (kind, i), given in states.items():
        state = given.clone()
        if kind == conv:
            layer.conv_states[i] = state
            layer.conv_kernel_size[i] = state.shape[-1]
            layer.is_conv_states_initialized[i] = True
        else:
            layer.recurrent_states[i] = state
            layer.is_recurrent_states_initialized[i] = True
        layer.has_previous_state[i] = True
        layer.dtype, layer.device = state.dtype, state.device


def fed_states(names: list[str]) -> dict[int, list[tuple[str, int, str]]]:
    """The states a graph's inputs feed, by own layer index: (kind, index, input name)."""
    out: dict[int, list[tuple[str, int, str]]] = {}
    for name in names:
        if CACHE.is_state(name) and CACHE.is_past(name):
            _, layer, kind, index = name.split(".")
            out.setdefault(int(layer), []).append((kind, int(index), name))
    return out


def state_specs(entries: list[tuple[int, str, Any]], specs: list[dict[str, Any]],
                outputs: list[str], reads_cache: bool
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """A causal LM graph's inputs and outputs for a model whose cache keeps recurrent states,
    from the plan's (`specs`, `outputs`: a key/value pair per layer) and what the model's own
    cache holds after one token (`entries`: own layer index, part, tensor): each layer's keys
    and values where it caches them (its buffers' slots as the plan's, its heads and width
    its own) and its states, whole, where it keeps them; the prompt graph gives them back
    only."""
    past = {s["name"]: s for s in specs if CACHE.is_past(s["name"])}
    slots = next((s["shape"][2] for s in past.values()), 0)
    inputs = [s for s in specs if s["name"] not in past]
    given = [outputs[0]]
    for layer, part, value in entries:
        name = f"{CACHE.past}.{layer}.{part}"
        given.append(CACHE.present_of(name))
        if not reads_cache:
            continue
        if part in CACHE.parts:
            spec = past.get(name) or {"min": -8.0, "max": 8.0, "kind": "lm_past"}
            shape = [*value.shape[:2], slots, *value.shape[3:]]
        else:
            spec = {"min": -8.0, "max": 8.0, "kind": STATE_KIND}
            shape = list(value.shape)
        inputs.append({**spec, "name": name, "dtype": "float32", "shape": shape})
    return inputs, given
