"""The torch modules an encoder-decoder model's cached decoding traces (planner/models/
seq2seq.py has their I/O): `cross`, the decoder's cross-attention keys and values on the
encoder's states (one decoder pass on the start token fills them; only they are returned, so
the rest of that pass is not in the graph), and the one-token `decoder` over a static
self-attention cache. Its cache is fed in full (C slots, the empty ones masked), so the model
would take C as the token's position: a hook on the decoder's position embedding gives it the
`position_ids` input instead. Cross keys and values are marked as filled, so no layer
recomputes them."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any


def _layers(model: Any) -> int:
    return int(model.config.decoder_layers)


@contextmanager
def positions_at(model: Any, position_ids: Any):
    """The decoder's position embedding reads `position_ids` (1-D) whatever it is given."""
    embed = model.get_decoder().embed_positions

    def hook(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, "position_ids": position_ids.reshape(-1)}

    handle = embed.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def _call(model: Any, feed: dict[str, Any], ids: Any, **kwargs: Any) -> Any:
    """The model's forward on given encoder states (Whisper's encoder takes no mask)."""
    kw = {"encoder_outputs": (feed["encoder_hidden_states"],), "decoder_input_ids": ids,
          "return_dict": True, "use_cache": True, **kwargs}
    if "encoder_attention_mask" in feed:
        kw["attention_mask"] = feed["encoder_attention_mask"]
    return model(**kw)


def cross(model: Any, feed: dict[str, Any]) -> tuple[Any, ...]:
    import torch

    start = int(model.config.decoder_start_token_id or 0)
    out = _call(model, feed, torch.full((1, 1), start, dtype=torch.long))
    layers = out.past_key_values.cross_attention_cache.layers
    return tuple(t for layer in layers[:_layers(model)] for t in (layer.keys, layer.values))


def step(model: Any, feed: dict[str, Any]) -> tuple[Any, ...]:
    from transformers import DynamicCache, EncoderDecoderCache

    mine, theirs = DynamicCache(config=model.config), DynamicCache(config=model.config)
    for i in range(_layers(model)):
        mine.update(feed[f"past_key_values.{i}.key"], feed[f"past_key_values.{i}.value"], i)
        theirs.update(feed[f"cross.{i}.key"], feed[f"cross.{i}.value"], i)
    cache = EncoderDecoderCache(mine, theirs)
    for i in range(_layers(model)):
        cache.is_updated[i] = True
    states = feed.get("encoder_hidden_states")
    if states is None:  # the layers read the cross cache; the states only give its shape
        import torch

        states = torch.zeros(1, feed["cross.0.key"].shape[2], model.config.d_model)
    with positions_at(model, feed["position_ids"]):
        out = _call(model, {**feed, "encoder_hidden_states": states}, feed["input_ids"],
                    decoder_attention_mask=feed["attention_mask"], past_key_values=cache)
    layers = out.past_key_values.self_attention_cache.layers
    return (out.logits, *(t for layer in layers[:_layers(model)]
                          for t in (layer.keys[:, :, -1:], layer.values[:, :, -1:])))


def graph_module(model: Any, graph: str, input_names: list[str]) -> Any:
    from executors.runtime.lmgraphs import positional

    return positional(model, input_names, cross if graph == "cross" else step)


def cached(input_names: list[str]) -> bool:
    """Whether a decoder graph's inputs are the cached one-token decoder's."""
    return "past_key_values.0.key" in input_names
