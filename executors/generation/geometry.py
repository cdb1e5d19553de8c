"""A causal LM's key/value cache geometry as the model itself fills it: which layers cache, and
each layer's key and value heads and width (a latent attention caches a compressed latent and
a rotary key, of widths of their own; Gemma 4's global layers are wider; Gemma 3n's shared
layers and layers without attention cache nothing). The planner derives an estimate from
config.json (planner/models/generation.py `layer_shapes`); the export shapes the graphs' cache
buffers from one forward of the model on a short prompt, so a layout the config does not say
(MiMo-V2-Flash's sliding-window layers cache twice its key/value heads) still gets buffers of
the shapes the model writes and reads, and a cache those buffers cannot carry is refused."""

from __future__ import annotations

from typing import Any

from planner.models.generation import Entry
from planner.models.roles import CACHE

PROBE_TOKENS = 2  # the prompt the model fills its cache with: its entries' shapes are read


def model_cache(model: Any) -> list[tuple[Entry, Entry]]:
    """Each cached layer's key and value (heads, width), from the cache the model fills on a
    prompt of PROBE_TOKENS tokens (the traced forward's: modules.lm_step); RecurrentState
    where a layer keeps a recurrent state, Uncarried where the cache holds what one key and one
    value buffer per layer cannot (`uncarried`)."""
    from executors.generation.cache import own_layers
    from executors.generation.modules import dynamic_cache, filled_cache
    from executors.generation.recurrent import RecurrentState, recurrent_layers

    made = dynamic_cache(model)
    recurrent = recurrent_layers(made)
    if recurrent:  # their states are graph_io's (modules.lm_io), not buffers
        raise RecurrentState(f"{type(model).__name__} keeps a recurrent state in layers "
                             f"{sorted(recurrent)}, which keys and values do not carry")
    count = len(made.layers)
    filled = filled_cache(model, made, PROBE_TOKENS)
    layers = own_layers(filled.layers)
    why = uncarried(type(model).__name__, count, filled.layers)
    if why:
        raise Uncarried(why)
    return [((int(layer.keys.shape[1]), int(layer.keys.shape[-1])),
             (int(layer.values.shape[1]), int(layer.values.shape[-1]))) for layer in layers]


class Uncarried(Exception):
    """A causal LM whose cache holds what the static cache's buffers do not carry."""


def uncarried(name: str, count: int, layers: list[Any]) -> str | None:
    """Why a filled cache is not one key and one value buffer per layer of the cache the config
    makes (`count` layers), or None: the forward added layers to it (Dory runs its recurrent
    layers twice, each time into layers of their own), or a layer keeps other tensors besides
    (DeepSeek-V4's compressors' buffers and compressed entries). transformers' indexed layers'
    indexer keys are not counted: they only choose `index_topk` of the tokens, and the plan
    keeps the context within it (every token chosen)."""
    from transformers.cache_utils import DynamicIndexedLayer

    if len(layers) > count:
        more = len(layers) - count
        return (f"{name} adds {more} key/value cache layer{'s' if more > 1 else ''} of its own "
                f"in its forward ({len(layers)} after a prompt, {count} in the cache its "
                "config makes: layers that run more than once, as Dory's recurrent loops), "
                "which the decode graph, fed the cache its config makes, cannot make again")
    kept = {i: sorted(_tensors(layer)) for i, layer in enumerate(layers)
            if not isinstance(layer, DynamicIndexedLayer)}
    kept = {i: names for i, names in kept.items() if names}
    if kept:
        classes = sorted({type(layers[i]).__name__ for i in kept})
        first = kept[min(kept)]
        return (f"{name}'s cache keeps more than keys and values in layer"
                f"{'s' if len(kept) > 1 else ''} {', '.join(map(str, kept))} (transformers' "
                f"{', '.join(classes)}: {', '.join(first)}), which the static key/value cache "
                "does not carry from one step to the next")
    return None


def _tensors(layer: Any) -> list[str]:
    """A cache layer's attributes besides its keys and values that hold tensors of tokens (not
    scalars), directly or in a dict or list."""
    import torch

    def holds(value: Any) -> bool:
        if isinstance(value, torch.Tensor):
            return value.dim() > 0
        if isinstance(value, dict):
            return any(holds(v) for v in value.values())
        if isinstance(value, list | tuple):
            return any(holds(v) for v in value)
        return False

    return [k for k, v in vars(layer).items() if k not in ("keys", "values") and holds(v)]


def fitted(specs: list[dict[str, Any]], outputs: list[str],
           layers: list[tuple[Entry, Entry]]) -> tuple[list[dict[str, Any]], list[str]]:
    """A causal LM graph's input specs and output names for the cache geometry `layers`: one
    past buffer per cached layer and part ([1, heads, slots, width], the slots and the rest of
    each spec as planned), one present output each, in the planned places."""
    past = [s for s in specs if CACHE.is_past(s["name"])]
    if past:
        names = CACHE.names(CACHE.past, len(layers))
        shapes = [entry for entries in layers for entry in entries]
        made = [{**past[0], "name": name, "shape": [1, heads, past[0]["shape"][2], width]}
                for name, (heads, width) in zip(names, shapes, strict=True)]
        at = specs.index(past[0])
        specs = [*specs[:at], *made,
                 *[s for s in specs[at:] if not CACHE.is_past(s["name"])]]
    present = [i for i, n in enumerate(outputs) if n.startswith(CACHE.present + ".")]
    if present:
        at = present[0]
        outputs = [*outputs[:at], *CACHE.names(CACHE.present, len(layers)),
                   *[n for n in outputs[at:] if not n.startswith(CACHE.present + ".")]]
    return specs, outputs


def described(layers: list[tuple[Entry, Entry]]) -> str:
    """A cache geometry in a line: `key 1x16, value 1x16` per layer, runs of equal layers once."""
    runs: list[tuple[int, tuple[Entry, Entry]]] = []
    for entries in layers:
        if runs and runs[-1][1] == entries:
            runs[-1] = (runs[-1][0] + 1, entries)
        else:
            runs.append((1, entries))
    return "; ".join(f"{count} layer{'s' if count > 1 else ''} of key {k[0]}x{k[1]}, value "
                     f"{v[0]}x{v[1]}" for count, (k, v) in runs)


def graph_io(model: Any, specs: list[dict[str, Any]], outputs: list[str], reads_cache: bool
             ) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """A causal LM graph's inputs and outputs shaped to the cache the model fills: the states
    of its layers that keep a recurrent one beside the others' keys and values
    (modules.lm_io), else each layer's key and value geometry (`model_cache`); and a line
    saying how that differs from the plan's (None where it does not). RecurrentState and
    Uncarried where the graphs cannot carry that cache."""
    from executors.generation.modules import lm_io

    carried = lm_io(model, specs, outputs, reads_cache)
    if carried != (specs, outputs):
        return *carried, "recurrent states in place of some layers' keys and values"
    layers = model_cache(model)
    fit_specs, fit_outputs = fitted(specs, outputs, layers)
    if fit_specs == specs and fit_outputs == outputs:
        return specs, outputs, None
    return fit_specs, fit_outputs, described(layers)
