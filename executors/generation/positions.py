"""A decoder given its token's position where it would count it itself. Over the static cache
the slots are all there, so a decoder that counts positions from its cache's length would take
every token's as the cache's size: `positions_at` gives it `position_ids` wherever its family
reads positions (a BART-, Whisper- or TrOCR-like `embed_positions`, a BERT-like embeddings
module, GPT-2's `wpe`), or for T5's relative attention bias computes the bias of the slots and
the token from their true positions."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def decoder_of(model: Any) -> Any:
    """The module that decodes: a captioner's text decoder (BLIP), else the model's decoder."""
    return model.text_decoder if hasattr(model, "text_decoder") else model.get_decoder()


@contextmanager
def positions_at(model: Any, position_ids: Any) -> Iterator[None]:
    """Within the block the decoder takes its token's position from `position_ids`."""
    decoder = decoder_of(model)
    bias = _relative_bias(decoder)
    if bias is not None:
        with _bias_at(bias, position_ids):
            yield
        return
    module, how = position_module(decoder)
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


def position_module(decoder: Any) -> tuple[Any, str]:
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
