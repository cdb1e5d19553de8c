"""The axes an export leaves free (`export.shapes.dynamic`): a text graph's batch and sequence,
a token graph's past and new tokens. Read from the traced example's shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.models.roles import CACHE


def free_axes(args: tuple, names: list[str], expected: Any, outputs: list[str],
              per_token: frozenset[str] = frozenset()) -> dict[str, dict[int, str]]:
    """export.shapes.dynamic: a text graph's batch and sequence axes, left free. Every input of
    tokens is [batch, sequence], and so is one of more values per token (`per_token`: a layout
    model's boxes, [batch, sequence, 4]); an output's first axis is the batch, and its second
    the sequence when it had the sequence's length in the trace (per-token outputs)."""
    length = args[0].shape[1]
    axes = {n: {0: "batch", 1: "sequence"} for n, a in zip(names, args, strict=True)
            if a.dim() == 2 or (n in per_token and a.shape[1] == length)}
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


def shorter(args: tuple, names: list[str], axes: dict[str, dict[int, str]] | None
            ) -> tuple | None:
    """The traced inputs cut to a shorter sequence, where the export leaves a text graph's
    sequence axis free (not a free past's): the second length its free axes are checked at.
    None where nothing is cut."""
    if not axes or not args or args[0].dim() != 2 or args[0].shape[1] < 3 or \
            any(CACHE.is_past(n) for n in names):
        return None
    cut = args[0].shape[1] // 2 + 1
    return tuple(a[:, :cut] if axes.get(n, {}).get(1) == "sequence" else a
                 for n, a in zip(names, args, strict=True))


def fix_axes(path: Path, args: tuple, names: list[str], expected: Any) -> str:
    """Declare the traced shapes on a graph whose free axes do not hold at another length (its
    trace unrolled a loop over the tokens): every input and output fixed at the trace's; a
    compiling target's fix_shapes then changes nothing. What it says in the export's metrics."""
    from executors.onnx.artifacts import load, save

    model = load(path, external=False)
    got = expected if isinstance(expected, tuple | list) else (expected,)
    shapes = {**{n: list(a.shape) for n, a in zip(names, args, strict=True)},
              **{o.name: list(v.shape) for o, v in zip(model.graph.output, got, strict=False)}}
    for value in (*model.graph.input, *model.graph.output):
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name], strict=False):
                dim.Clear()
                dim.dim_value = int(size)
    save(model, path)
    length = args[0].shape[1]
    return f"the graph holds at the traced length only: its axes fixed at {length} tokens"
