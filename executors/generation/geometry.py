"""A causal LM's key/value cache geometry as the model itself fills it: which layers cache, and
each layer's key and value heads and width (a latent attention caches a compressed latent and
a rotary key, of widths of their own; Gemma 4's global layers are wider; Gemma 3n's shared
layers and Dory's MLP layers cache nothing). The planner derives an estimate from config.json
(planner/models/generation.py `layer_shapes`); the export shapes the graphs' cache buffers
from one forward of the model on a short prompt, so a layout the config does not say still
gets buffers of the shapes the model writes and reads."""

from __future__ import annotations

from typing import Any

from planner.models.generation import Entry
from planner.models.roles import CACHE

PROBE_TOKENS = 2  # the prompt the model fills its cache with: its entries' shapes are read


def model_cache(model: Any) -> list[tuple[Entry, Entry]]:
    """Each cached layer's key and value (heads, width), from the entries the traced forward
    (modules.lm_step) gives on a prompt of PROBE_TOKENS tokens; RecurrentState where a layer
    keeps a state besides (or instead of) keys and values, which no such geometry holds, and
    GrownCache where the forward adds layers to the cache it is given."""
    import torch

    from executors.generation.modules import dynamic_cache, lm_step
    from executors.generation.recurrent import refuse_recurrent

    made = len(dynamic_cache(model).layers)
    refuse_recurrent(type(model).__name__, dynamic_cache(model))
    ids = torch.zeros((1, PROBE_TOKENS), dtype=torch.long)
    with torch.no_grad():
        out = lm_step(model, ids, torch.ones_like(ids), torch.arange(PROBE_TOKENS)[None])
    entries = [(int(t.shape[1]), int(t.shape[-1])) for t in out[1:]]
    filled = len(entries) // 2
    if filled > made:
        more = filled - made
        raise GrownCache(f"{type(model).__name__} adds {more} key/value cache "
                         f"layer{'s' if more > 1 else ''} of its own in its forward ({filled} "
                         f"after a prompt, {made} in the "
                         "cache its config makes: layers that run more than once, as Dory's "
                         "recurrent loops), which the decode graph, fed the cache its config "
                         "makes, cannot make again")
    return list(zip(entries[0::2], entries[1::2], strict=True))


class GrownCache(Exception):
    """A causal LM whose forward adds layers to the cache its config makes."""


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
