"""The axes an export leaves free (`export.shapes.dynamic`): a text graph's batch and sequence,
a token graph's past and new tokens. Read from the traced example's shapes."""

from __future__ import annotations

from typing import Any

from planner.models.roles import CACHE


def free_axes(args: tuple, names: list[str], expected: Any,
              outputs: list[str]) -> dict[str, dict[int, str]]:
    """export.shapes.dynamic: a text graph's batch and sequence axes, left free. Every input of
    tokens is [batch, sequence]; an output's first axis is the batch, and its second the
    sequence when it had the sequence's length in the trace (per-token outputs)."""
    length = args[0].shape[1]
    axes = {n: {0: "batch", 1: "sequence"} for n, a in zip(names, args, strict=True)
            if a.dim() == 2}
    got = expected if isinstance(expected, tuple | list) else (expected,)
    for name, value in zip(outputs, got, strict=False):
        if CACHE.is_state(name):  # a recurrent layer's state: one sequence's, of fixed shape
            continue
        axes[name] = {0: "batch"} | ({1: "sequence"} if value.dim() >= 2
                                     and value.shape[1] == length else {})
    return axes


def past_axes(names: list[str], outputs: list[str]) -> dict[str, dict[int, str]]:
    """A token graph with a free past (a causal LM's, an encoder-decoder's cached decoder): its
    new tokens' axis, the past's and the total's (past + new: the mask over both, and the
    present entries it gives back); an encoder-decoder's cross entries and a recurrent layer's
    states keep their shapes."""
    axes: dict[str, dict[int, str]] = {}
    for name in names:
        if name.startswith(CACHE.cross + ".") or CACHE.is_state(name):  # fixed shapes
            continue
        axes[name] = {2: "past_sequence_length"} if CACHE.is_past(name) else \
            {1: "total_sequence_length"} if name == "attention_mask" else \
            {1: "sequence_length"}
    for name in outputs:
        if CACHE.is_state(name):
            continue
        axes[name] = {2: "total_sequence_length"} if name.startswith(CACHE.present + ".") \
            else {1: "sequence_length"}
    return axes
