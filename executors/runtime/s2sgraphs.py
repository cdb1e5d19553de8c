"""The torch modules an encoder-decoder model's cached decoding traces (planner/models/
seq2seq.py has their I/O): `cross`, the decoder's cross-attention keys and values on the
encoder's states (one decoder pass on the start token fills them; only they are returned, so
the rest of that pass is not in the graph), and the one-token `decoder` over a static
self-attention cache. Cross keys and values are marked as filled, so no layer recomputes them.

Its cache is fed in full (C slots, the empty ones masked) and the token's own key goes after
them, so the model would take C as the token's position: `positions_at` gives the decoder the
`position_ids` input instead, wherever its family reads positions (a BART-, Whisper- or
TrOCR-like `embed_positions`, a BERT-like embeddings module, GPT-2's `wpe`), or for T5's
relative attention bias, computes the bias of the slots and the token from their true
positions.

One forward (`decode`) serves the traced graphs and the calibration samples: the model's own
forward on given encoder states, or a captioner's text decoder on the image's (BLIP)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from planner.models.seq2seq import start_token


def decoder_of(model: Any) -> Any:
    """The module that decodes: a captioner's text decoder (BLIP), else the model's decoder."""
    return model.text_decoder if hasattr(model, "text_decoder") else model.get_decoder()


def start(model: Any) -> int:
    return int(start_token(model.config.to_dict()) or 0)


def decode(model: Any, states: Any, ids: Any, encoder_mask: Any = None,
           use_cache: bool = True, **kwargs: Any) -> Any:
    """One decoder forward on the encoder's `states` (return_dict; use_cache off: the
    decoder of the whole prefix, torchmodel.decoder_forward)."""
    if hasattr(model, "text_decoder"):  # BLIP: the text decoder reads the image's states
        import torch

        mask = kwargs.pop("decoder_attention_mask", None)
        return model.text_decoder(input_ids=ids, encoder_hidden_states=states,
                                  attention_mask=torch.ones_like(ids) if mask is None else mask,
                                  use_cache=use_cache, return_dict=True, **kwargs)
    if "past_key_values" in kwargs and "cache" in inspect.signature(model.forward).parameters:
        kwargs["cache"] = kwargs.pop("past_key_values")  # its name from transformers 5.40 on
    kw = {"encoder_outputs": (states,), "decoder_input_ids": ids, "return_dict": True,
          "use_cache": use_cache, **kwargs}
    if encoder_mask is not None:
        kw["attention_mask"] = encoder_mask
    return model(**kw)


@contextmanager
def positions_at(model: Any, position_ids: Any) -> Iterator[None]:
    """Within the block the decoder takes its token's position from `position_ids`."""
    decoder = decoder_of(model)
    bias = _relative_bias(decoder)
    if bias is not None:
        with _bias_at(bias, position_ids):
            yield
        return
    module, how = _position_module(decoder)
    if how == "kwargs":
        hook = module.register_forward_pre_hook(
            lambda _m, args, kwargs: (args, {**kwargs, "position_ids": position_ids.reshape(
                1, -1) if _two_d(module) else position_ids.reshape(-1)}), with_kwargs=True)
    else:  # an embedding table indexed by positions (GPT-2's wpe)
        hook = module.register_forward_pre_hook(lambda _m, _args: (position_ids.reshape(1, -1),))
    try:
        yield
    finally:
        hook.remove()


def _two_d(module: Any) -> bool:
    """Whether an embeddings module takes [batch, sequence] positions (BERT-like)."""
    return hasattr(module, "position_embeddings")


def _position_module(decoder: Any) -> tuple[Any, str]:
    for name, module in decoder.named_modules():
        if name.rsplit(".", 1)[-1] == "embed_positions" and \
                "position_ids" in inspect.signature(module.forward).parameters:
            return module, "kwargs"
    for _name, module in decoder.named_modules():
        if hasattr(module, "position_embeddings") and \
                "position_ids" in inspect.signature(module.forward).parameters:
            return module, "kwargs"
    for _name, module in decoder.named_modules():
        if hasattr(module, "wpe"):
            return module.wpe, "table"
    raise ValueError(f"the cached decoder cannot give {type(decoder).__name__} its token's "
                     "position (no position embedding it knows); set "
                     "export.shapes.decoder_cache=false")


def _relative_bias(decoder: Any) -> Any:
    """The decoder's first self-attention when it computes a relative position bias (T5)."""
    for _name, module in decoder.named_modules():
        if getattr(module, "has_relative_attention_bias", False) and \
                getattr(module, "is_decoder", False) and hasattr(module, "compute_bias"):
            return module
    return None


@contextmanager
def _bias_at(attention: Any, position_ids: Any) -> Iterator[None]:
    """T5's bias for one query at `position` over C cache slots (slot i holds position i) and
    the token itself, after them: relative positions [0 .. C-1, position] - position. The
    bias of every position is a constant table (its buckets take a logarithm, which HTP does
    not run); the graph gathers the row of `position`."""
    import torch

    def bias(query_length: int, key_length: int, device: Any = None, **_: Any) -> Any:
        slots = key_length - 1
        where = torch.arange(slots)
        table = attention.relative_attention_bias(attention._relative_position_bucket(
            where[None, :] - where[:, None], bidirectional=not attention.is_decoder,
            num_buckets=attention.relative_attention_num_buckets,
            max_distance=attention.relative_attention_max_distance))  # [position, slot, heads]
        own = attention.relative_attention_bias(torch.zeros(1, 1, dtype=torch.long))
        row = table.index_select(0, position_ids.reshape(-1)[:1])  # [1, slots, heads]
        return torch.cat([row, own], dim=1).permute([2, 0, 1]).unsqueeze(0)

    attention.compute_bias = bias
    try:
        yield
    finally:
        del attention.compute_bias


def _layers(feed: dict[str, Any]) -> int:
    return sum(1 for k in feed if k.startswith("past_key_values.") and k.endswith(".key"))


def cross(model: Any, feed: dict[str, Any]) -> tuple[Any, ...]:
    import torch

    ids = torch.full((1, 1), start(model), dtype=torch.long)
    out = decode(model, feed["encoder_hidden_states"], ids, feed.get("encoder_attention_mask"))
    layers = out.past_key_values.cross_attention_cache.layers
    return tuple(t for layer in layers for t in (layer.keys, layer.values))


def step(model: Any, feed: dict[str, Any]) -> tuple[Any, ...]:
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

    layers = _layers(feed)
    mine, theirs = DynamicCache(), DynamicCache()
    for i in range(layers):
        mine.update(feed[f"past_key_values.{i}.key"], feed[f"past_key_values.{i}.value"], i)
        theirs.update(feed[f"cross.{i}.key"], feed[f"cross.{i}.value"], i)
    cache = EncoderDecoderCache(mine, theirs)
    for i in range(layers):
        cache.is_updated[i] = True
    # the layers read the cross cache; the states give its length and width only
    states = torch.zeros(1, feed["cross.0.key"].shape[2], encoder_width(model))
    with positions_at(model, feed["position_ids"]):
        out = decode(model, states, feed["input_ids"], feed.get("encoder_attention_mask"),
                     decoder_attention_mask=feed["attention_mask"], past_key_values=cache)
    own = out.past_key_values.self_attention_cache.layers
    return (out.logits, *(t for layer in own[:layers]
                          for t in (layer.keys[:, :, -1:], layer.values[:, :, -1:])))


def encoder_width(model: Any) -> int:
    """The width of the encoder's states the decoder reads."""
    cfg = model.config
    for part in (getattr(cfg, "encoder", None), getattr(cfg, "vision_config", None), cfg):
        for key in ("d_model", "hidden_size"):
            value = getattr(part, key, None) if part is not None else None
            if isinstance(value, int):
                return value
    raise ValueError(f"{type(model).__name__}: its config says no encoder width")


def graph_module(model: Any, graph: str, input_names: list[str]) -> Any:
    from executors.runtime.lmgraphs import positional

    return positional(model, input_names, cross if graph == "cross" else step)


def cached(input_names: list[str]) -> bool:
    """Whether a decoder graph's inputs are the cached one-token decoder's."""
    return "past_key_values.0.key" in input_names
