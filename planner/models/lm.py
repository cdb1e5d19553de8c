"""A causal language model's two graphs over a static key/value cache, derived at plan time
from config.json: the prefill graph reads a prompt of `export.shapes.prefill_length` tokens;
the decode graph reads one token, its position, and `context_length` cache slots per layer.
Both return the logits and the new tokens' keys and values only ("present"): the host writes
them into its cache buffer, so no graph scatters into a tensor and every shape is fixed.

Names follow onnxruntime-genai's conventions (`past_key_values.{i}.key`, `present.{i}.key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import ConfigError

DEFAULT_PREFILL = 64
DEFAULT_CONTEXT = 256
PART_BYTES = int(1.8 * 2**30)  # a part's weights stay under one protobuf's (and one embedded
                               # context binary's) 2 GB, with room for the graph itself
# config.json fields that name the same quantity across model families
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers")
_HEADS = ("num_attention_heads", "n_head")
_WIDTH = ("hidden_size", "n_embd", "d_model")
_POSITIONS = ("max_position_embeddings", "n_positions", "max_sequence_length", "n_ctx")


@dataclass(frozen=True)
class Shape:
    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    positions: int | None


def _first(info: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((info[k] for k in keys if isinstance(info.get(k), int)), None)


def shape_of(info: dict[str, Any]) -> Shape:
    """Layers, key/value heads, head width, vocabulary and position limit of a causal LM."""
    text = info.get("text_config") or info
    layers, heads, width = (_first(text, k) for k in (_LAYERS, _HEADS, _WIDTH))
    vocab = text.get("vocab_size")
    missing = [name for name, value in (("num_hidden_layers", layers),
                                        ("num_attention_heads", heads),
                                        ("hidden_size", width), ("vocab_size", vocab))
               if not value]
    if missing:
        raise ConfigError(f"model: the checkpoint's config.json has no {', '.join(missing)} "
                          f"(model_type {info.get('model_type')!r}); a causal LM's key/value "
                          "cache is derived from them: add them to config.json")
    kv = text.get("num_key_value_heads") or (1 if text.get("multi_query") else heads)
    head_dim = text.get("head_dim") or width // heads
    return Shape(layers, int(kv), int(head_dim), int(vocab), _first(text, _POSITIONS))


def window(info: dict[str, Any]) -> int | None:
    """The sliding attention window, where the model uses one (its cache then keeps only the
    last `window` tokens, which a static cache of more slots would not match)."""
    text = info.get("text_config") or info
    size = text.get("sliding_window")
    if not isinstance(size, int) or text.get("use_sliding_window") is False:
        return None
    return size


def lengths(info: dict[str, Any], shapes: dict[str, Any]) -> tuple[int, int]:
    """(prefill_length, context_length), checked against the model's position limit and its
    sliding window: the tokens take positions 0 .. context_length - 1."""
    limit = shape_of(info).positions
    slide = window(info)
    bound = min(b for b in (limit, slide, 2**31) if b)
    context = shapes.get("context_length")
    if context is None:
        context = min(DEFAULT_CONTEXT, bound)
    elif limit is not None and context > limit:
        raise ConfigError(f"export.shapes.context_length: {context} tokens need {context} "
                          f"positions, but the model has {limit}; set "
                          f"export.shapes.context_length={limit} or less")
    elif slide is not None and context > slide:
        raise ConfigError(f"export.shapes.context_length: {context} cache slots, but the "
                          f"model attends to a sliding window of {slide} tokens, which a static "
                          f"cache does not slide; set export.shapes.context_length={slide} or "
                          "less")
    prefill = shapes.get("prefill_length")
    if prefill is None:
        prefill = min(DEFAULT_PREFILL, context)
    elif prefill > context:
        raise ConfigError(f"export.shapes.prefill_length: {prefill} prompt tokens do not fit "
                          f"the {context} cache slots; set export.shapes.prefill_length="
                          f"{context} or less, or raise export.shapes.context_length")
    return prefill, context


def cache_names(layers: int, prefix: str) -> list[str]:
    return [f"{prefix}.{i}.{part}" for i in range(layers) for part in ("key", "value")]


def _spec(name: str, dtype: str, shape: list[int], lo: float, hi: float,
          kind: str) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "min": lo, "max": hi, "kind": kind}


HOST_LAYERS = ("embeddings", "head")  # what export.on_host may place on the host CPU


def graph_specs(info: dict[str, Any], shapes: dict[str, Any], batch: int,
                on_host: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """The two graphs' I/O. With "embeddings" on the host they take `inputs_embeds` (the
    host looks the tokens up), with "head" they return `hidden_states` (the host computes
    the logits): the vocabulary-sized matrices then stay off the target."""
    if batch != 1:
        raise ConfigError("export.shapes.batch_size: a causal LM's graphs decode one sequence "
                          "(batch 1); set export.shapes.batch_size=1")
    s = shape_of(info)
    prefill, context = lengths(info, shapes)
    outputs = ["hidden_states" if "head" in on_host else "logits",
               *cache_names(s.layers, "present")]
    width = _first(info.get("text_config") or info, _WIDTH)
    top = context - 1  # positions run 0 .. context - 1
    prompt = [_spec("input_ids", "int64", [1, prefill], 0, s.vocab - 1, "lm_prompt_ids"),
              _spec("attention_mask", "int64", [1, prefill], 0, 1, "lm_prompt_mask"),
              _spec("position_ids", "int64", [1, prefill], 0, top, "lm_prompt_positions")]
    past = [_spec(n, "float32", [1, s.kv_heads, context, s.head_dim], -8.0, 8.0, "lm_past")
            for n in cache_names(s.layers, "past_key_values")]
    step = [_spec("input_ids", "int64", [1, 1], 0, s.vocab - 1, "lm_step_ids"),
            _spec("position_ids", "int64", [1, 1], 0, top, "lm_step_positions"),
            _spec("attention_mask", "int64", [1, context + 1], 0, 1, "lm_step_mask"), *past]
    if "embeddings" in on_host:
        prompt[0] = _spec("inputs_embeds", "float32", [1, prefill, width], -1.0, 1.0,
                          "lm_prompt_embeds")
        step[0] = _spec("inputs_embeds", "float32", [1, 1, width], -1.0, 1.0, "lm_step_embeds")
    return {"prefill": {"inputs": prompt, "outputs": outputs},
            "decode": {"inputs": step, "outputs": outputs}}


def weight_bytes(info: dict[str, Any], weight_bits: int, table_bits: int) -> int:
    """The weights of a causal LM's graph at the build's precision, from config.json: the
    layers' matrices at `weight_bits`, the embedding table (and an untied head) at
    `table_bits` (ORT quantizes a Gather's table at the activation type)."""
    text = info.get("text_config") or info
    s = shape_of(info)
    width = _first(text, _WIDTH)
    heads = _first(text, _HEADS)
    inter = text.get("intermediate_size") or text.get("n_inner") or 4 * width
    gated = 3 if "intermediate_size" in text else 2  # SwiGLU's gate, up and down
    attention = 2 * width * heads * s.head_dim + 2 * width * s.kv_heads * s.head_dim
    layers = s.layers * (attention + gated * width * inter)
    tables = s.vocab * width * (1 if text.get("tie_word_embeddings", False) else 2)
    return (layers * weight_bits + tables * table_bits) // 8


def parts(info: dict[str, Any], asked: int | None, weight_bits: int, table_bits: int,
          compiles: bool) -> int:
    """How many parts each graph is cut into: `export.parts` when set, else as many as keep
    every part under PART_BYTES when the target compiles the graph into one binary (a CPU
    graph keeps its weights in files beside it, so it has no such limit)."""
    layers = shape_of(info).layers
    if asked is not None:
        if asked > layers:
            raise ConfigError(f"export.parts: {asked} parts of a model with {layers} layers; "
                              f"set export.parts={layers} or less")
        return asked
    if not compiles:
        return 1
    return min(layers, -(-weight_bytes(info, weight_bits, table_bits) // PART_BYTES))
