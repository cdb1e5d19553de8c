"""An encoder-decoder model's decoder over a static self-attention key/value cache
(`export.shapes.decoder_cache=true`): besides the encoder, a `cross` graph computes every
decoder layer's cross-attention keys and values from the encoder's states once per input, and
the `decoder` graph decodes one token from its position, `decoder_sequence_length` cache slots per
layer (the empty ones masked) and the cross keys and values. The step returns the logits and
the token's own keys and values, which the host writes into slot `position`; the cost of a
token does not grow with the prefix (the uncached decoder recomputes the whole prefix)."""

from __future__ import annotations

from typing import Any

from planner.errors import ConfigError


def _spec(name: str, dtype: str, shape: list[int], lo: float, hi: float,
          kind: str) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "min": lo, "max": hi, "kind": kind}


def decoder_shape(info: dict[str, Any]) -> tuple[int, int, int]:
    """(layers, heads, head width) of the decoder, from config.json."""
    layers = info.get("decoder_layers")
    heads = info.get("decoder_attention_heads")
    width = info.get("d_model")
    if not (layers and heads and width) or "decoder" in info:
        raise ConfigError(f"export.shapes.decoder_cache: the cached decoder is built for "
                          f"BART-, Marian- and Whisper-like decoders (decoder_layers, "
                          f"decoder_attention_heads, d_model in config.json), not model_type "
                          f"{info.get('model_type')!r}; set export.shapes.decoder_cache=false")
    return int(layers), int(heads), int(width) // int(heads)


def cached_graphs(info: dict[str, Any], states: dict[str, Any], cross: list[dict[str, Any]],
                  slots: int, vocab: int, outputs: list[str]) -> dict[str, dict[str, Any]]:
    layers, heads, head_dim = decoder_shape(info)
    enc_seq = states["shape"][1]
    cross_kv = [f"cross.{i}.{p}" for i in range(layers) for p in ("key", "value")]
    present = [f"present.{i}.{p}" for i in range(layers) for p in ("key", "value")]
    past = [_spec(f"past_key_values.{i}.{p}", "float32", [1, heads, slots, head_dim], -8.0, 8.0,
                  "s2s_past") for i in range(layers) for p in ("key", "value")]
    kv = [_spec(n, "float32", [1, heads, enc_seq, head_dim], -8.0, 8.0, "s2s_cross")
          for n in cross_kv]
    step = [_spec("input_ids", "int64", [1, 1], 0, vocab - 1, "s2s_step_ids"),
            _spec("position_ids", "int64", [1, 1], 0, slots, "s2s_positions"),
            _spec("attention_mask", "int64", [1, slots + 1], 0, 1, "s2s_mask"),
            *cross, *past, *kv]
    # the cross keys and values do not read the encoder's mask (the step does)
    return {"cross": {"inputs": [states], "outputs": cross_kv},
            "decoder": {"inputs": step, "outputs": [outputs[0], *present]}}
