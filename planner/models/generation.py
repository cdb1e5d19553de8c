"""The graphs of a generating model over a static key/value cache, derived at plan time from
config.json (planner/models/roles.py declares their roles and the cache's names).

A causal LM (decoder-only): the prefill graph reads a window of `export.shapes.prefill_length`
prompt tokens, their positions, and `context_length` cache slots per layer (the prompt's
earlier windows: a prompt of any length up to the context is read a window at a time); the
decode graph reads one token the same way. Both take a mask over the slots and their own
tokens, and return the logits and the new tokens' keys and values only ("present"): the host
writes them into its cache buffer, so no graph scatters into a tensor and every shape is fixed.
Names follow onnxruntime-genai's conventions (`past_key_values.{i}.key`, `present.{i}.key`).

An encoder-decoder's cached decoder is planner/models/seq2seq.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import ConfigError
from planner.models.roles import CACHE, DECODE, PREFILL, UNCACHED

# onnxruntime-genai's model types a causal LM's bundle is written as: its plain decoder (one
# graph of a free past, present = past + new) and its pipeline of graphs
GENAI_DECODER, GENAI_PIPELINE = "decoder", "decoder-pipeline"
GENAI_SECTION = "decoder"  # genai_config.json's model section that describes those graphs
# graphs of fixed shapes as one graph that genai's plain decoder runs with its windowed uint8
# key/value cache (executors/generation/windowed.py)
GENAI_WINDOWED_GRAPH = "genai_model.onnx"
GENAI_ENCODER_SECTION = "encoder"  # and an encoder-decoder's encoder's
# the encoder-decoder types onnxruntime-genai 0.18 runs, by config.json's model_type: its
# model.type for them, and the encoder input length its runner feeds (Whisper: 3000 log-mel
# frames, 30 s; its `marian-ssru` type is Marian NMT's recurrent decoder, not MarianMT's)
GENAI_WHISPER = "whisper"
GENAI_ENCODER_DECODERS = {"whisper": GENAI_WHISPER}
GENAI_WHISPER_FRAMES = 3000
DEFAULT_PREFILL = 64
DEFAULT_CONTEXT = 256
PART_BYTES = int(1.8 * 2**30)  # a part's weights stay under one protobuf's (and one embedded
                               # context binary's) 2 GB, with room for the graph itself
# config.json fields that name the same quantity across model families
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")
_LAYER_KINDS = ("layer_types", "layers_block_type")  # a kind per layer, under their names
_HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "attention_heads",
          "decoder_attention_heads")
_WIDTH = ("hidden_size", "n_embd", "d_model", "emb_dim")
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


def heads_and_width(info: dict[str, Any]) -> tuple[int | None, int | None]:
    """A causal LM's attention heads and hidden width, under the names configs give them."""
    text = info.get("text_config") or info
    return _first(text, _HEADS), _first(text, _WIDTH)


def shape_of(info: dict[str, Any]) -> Shape:
    """Layers, key/value heads, head width, vocabulary and position limit of a causal LM (its
    layers counted from its list of layer kinds where no field counts them: Nemotron-H's
    `layers_block_type`)."""
    text = info.get("text_config") or info
    layers, heads, width = (_first(text, k) for k in (_LAYERS, _HEADS, _WIDTH))
    if not layers:
        kinds = next((text[k] for k in _LAYER_KINDS if isinstance(text.get(k), list)), None)
        layers = len(kinds) if kinds else None
    vocab = text.get("vocab_size")
    missing = [name for name, value in (("num_hidden_layers", layers),
                                        ("hidden_size", width), ("vocab_size", vocab))
               if not value]
    if missing:
        raise ConfigError(f"model: the checkpoint's config.json has no {', '.join(missing)} "
                          f"(model_type {info.get('model_type')!r}); a causal LM's key/value "
                          "cache is derived from them: add them to config.json")
    if not heads:  # no attention (a state-space model's config, its class's defaults read):
        # the plan's estimate is one head a layer wide; the export reads the cache the model
        # fills (its layers' recurrent states: executors/generation/geometry.py graph_io)
        return Shape(layers, 1, int(width), int(vocab), _first(text, _POSITIONS))
    kv = text.get("num_key_value_heads") or (1 if text.get("multi_query") else heads)
    head_dim = text.get("head_dim") or width // heads
    return Shape(layers, int(kv), int(head_dim), int(vocab), _first(text, _POSITIONS))


def cached_layers(info: dict[str, Any]) -> list[int]:
    """The layers with a cache of their own, as transformers' cache makes them from the config:
    not the last `num_kv_shared_layers` nor those `kv_sharing_modes` says "reuse", which read
    an earlier layer's keys and values (Gemma 3n's, Gemma 4's), nor the layers `layer_types`
    says are "mlp" or "moe", which have no attention (Dory's)."""
    text = info.get("text_config") or info
    layers = shape_of(info).layers
    shared = text.get("num_kv_shared_layers")
    skipped = set(range(layers - shared, layers)) if isinstance(shared, int) else set()
    types, modes = text.get("layer_types"), text.get("kv_sharing_modes")
    if isinstance(types, list):
        skipped |= {i for i, kind in enumerate(types) if kind in ("mlp", "moe")}
    if isinstance(modes, list):
        skipped |= {i for i, mode in enumerate(modes) if mode == "reuse"}
    return [i for i in range(layers) if i not in skipped]


def cache_layers(info: dict[str, Any]) -> int:
    """How many layers have a cache of their own (cached_layers)."""
    return len(cached_layers(info))


Entry = tuple[int, int]  # one cache tensor's (heads, width) per token


def latent(info: dict[str, Any]) -> tuple[Entry, Entry] | None:
    """Multi-head latent attention's cache (a config with `kv_lora_rank` and
    `qk_rope_head_dim`: DeepSeek-V2/V3, MiniCPM3, GLM-4-MoE-Lite, ...): transformers caches the
    compressed latent as a layer's "key" (one head of `kv_lora_rank`) and the rotary key as its
    "value" (one head of `qk_rope_head_dim`), and expands both into every head at each step."""
    text = info.get("text_config") or info
    rank, rope = text.get("kv_lora_rank"), text.get("qk_rope_head_dim")
    if isinstance(rank, int) and isinstance(rope, int):
        return (1, rank), (1, rope)
    return None


def layer_shapes(info: dict[str, Any]) -> list[tuple[Entry, Entry]]:
    """Each cached layer's key and value (heads, width): the model's (values `v_head_dim` wide
    where the config says so), a latent attention's (`latent`), or those its config.json's
    `per_layer_config` (transformers' per-layer overrides, by layer index) gives a layer
    (Gemma 4's full-attention layers are wider). The plan's estimate: the export shapes the
    graphs from the cache the model itself fills (executors/generation/geometry.py)."""
    s = shape_of(info)
    text = info.get("text_config") or info
    overrides = {int(i): o for i, o in (text.get("per_layer_config") or {}).items()
                 if isinstance(o, dict)}
    mla = latent(info)
    values = text.get("v_head_dim")  # values of their own width (MiMo-V2-Flash's)
    shapes = []
    for i in range(s.layers):
        own = overrides.get(i, {})
        heads = int(own.get("num_key_value_heads") or s.kv_heads)
        width = int(own.get("head_dim") or s.head_dim)
        shapes.append(mla or ((heads, width),
                              (heads, values if isinstance(values, int) else width)))
    return [shapes[i] for i in cached_layers(info)]


def window(info: dict[str, Any]) -> tuple[str, int, int] | None:
    """The sliding attention window, where the model uses one (its cache then keeps only the
    last tokens of it, which a static cache of more slots would not match): its field, its
    size, and the cache slots it covers: one less than its size (Mistral's `sliding_window`,
    GPT-Neo's `window_size`), as the masks count key indices, where a step's token, after the
    slots, is at index context_length (measured: a Mistral of window 16 matches PyTorch over 15
    slots and leaves it over 16)."""
    text = info.get("text_config") or info
    if text.get("use_sliding_window") is False:
        return None
    for field in ("sliding_window", "window_size"):
        if isinstance(text.get(field), int):
            return field, text[field], text[field] - 1
    return None


def indexed(info: dict[str, Any]) -> int | None:
    """The most cache slots a sparse attention's indexer (`index_topk`: DeepSeek-V3.2,
    GLM-MoE-DSA) reads exactly: it chooses index_topk of the slots and the step's token by
    indexer keys, which the static cache does not carry; of index_topk - 1 slots it chooses
    all, as PyTorch's does. None where the model has no indexer."""
    text = info.get("text_config") or info
    topk = text.get("index_topk")
    return topk - 1 if isinstance(topk, int) and topk > 1 else None


def lengths(info: dict[str, Any], shapes: dict[str, Any]) -> tuple[int, int]:
    """(prefill_length, context_length), checked against the model's position limit, its
    sliding window and its sparse attention's indexer: the tokens take positions
    0 .. context_length - 1, and a prompt window's last token attends to every slot and the
    window before it (the defaults shrink to fit; a length set that does not is refused)."""
    limit = shape_of(info).positions
    slide = window(info)
    reach = slide[2] if slide else None
    chosen = indexed(info)
    bound = min(b for b in (limit, reach, chosen, 2**31) if b)
    context = shapes.get("context_length")
    if context is None:
        context = min(DEFAULT_CONTEXT, bound)
    elif limit is not None and context > limit:
        raise ConfigError(f"export.shapes.context_length: {context} tokens need {context} "
                          f"positions, but the model has {limit}; set "
                          f"export.shapes.context_length={limit} or less")
    elif slide and reach is not None and context > reach:
        raise ConfigError(f"export.shapes.context_length: {context} cache slots, but the "
                          f"model attends to a sliding window of {slide[1]} tokens "
                          f"({slide[0]}), which covers {reach} slots and a static cache does "
                          f"not slide; set export.shapes.context_length={reach} or less")
    elif chosen is not None and context > chosen:
        raise ConfigError(f"export.shapes.context_length: {context} cache slots, but the "
                          f"model's sparse attention chooses index_topk {chosen + 1} of the "
                          "slots and the step's token by indexer keys, which the static cache "
                          f"does not carry (of {chosen} slots or fewer it chooses all); set "
                          f"export.shapes.context_length={chosen} or less")
    prefill = shapes.get("prefill_length")
    if prefill is None:
        prefill = min(DEFAULT_PREFILL, context)
    elif prefill > context:
        raise ConfigError(f"export.shapes.prefill_length: {prefill} prompt tokens do not fit "
                          f"the {context} cache slots; set export.shapes.prefill_length="
                          f"{context} or less, or raise export.shapes.context_length")
    spans = [b for b in (reach, chosen) if b]  # a window's last token sees slots + window
    if spans and context + prefill - 1 > min(spans):
        prefill, context = _within(min(spans), prefill, context, shapes)
    return prefill, context


def _within(span: int, prefill: int, context: int, shapes: dict[str, Any]) -> tuple[int, int]:
    """(prefill, context) whose window's last token sees at most `span` earlier slots and
    tokens (context + prefill - 1 <= span): the lengths the user left unset shrink to fit, and
    lengths that cannot are refused in one line."""
    asked_prefill = shapes.get("prefill_length") is not None
    asked_context = shapes.get("context_length") is not None
    if not asked_prefill and not asked_context:
        prefill = min(prefill, max(1, (span + 1) // 4))  # most of the span for the slots
        return prefill, min(context, span - prefill + 1)
    if asked_context and not asked_prefill and 1 <= span - context + 1:
        return min(prefill, span - context + 1), context
    if asked_prefill and not asked_context and prefill <= span - prefill + 1:
        return prefill, span - prefill + 1
    raise ConfigError(f"export.shapes: a prompt window's last token sees the {context} cache "
                      f"slots and the window's {prefill} tokens, and the model's attention "
                      f"covers {span + 1} of them; set export.shapes.context_length + "
                      f"export.shapes.prefill_length to {span + 1} or less")


def cache_names(layers: int, prefix: str) -> list[str]:
    return CACHE.names(prefix, layers)


def input_spec(name: str, dtype: str, shape: list[int], lo: float, hi: float,
          kind: str) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "min": lo, "max": hi, "kind": kind}


HOST_LAYERS = ("embeddings", "head")  # what export.on_host may place on the host CPU
# what a genai pipeline stage makes of genai's feed (ids, past_seq_len, total_seq_len and the
# buffers) for the graph it wraps (executors/generation/stages.py)
# (inputs_embeds: what the host's embeddings stage gives, export.on_host)
GENAI_STAGE_MAKES = ("input_ids", "attention_mask", "position_ids", "inputs_embeds")


def uniform_cache(info: dict[str, Any]) -> bool:
    """Whether every layer caches keys and values of config.json's one geometry, which is all
    genai's decoder describes (`num_key_value_heads` heads of `head_size`, every one of
    `num_hidden_layers`): not Gemma 4's wider global layers, a latent attention's keys and
    values, Gemma 3n's layers without a cache of their own."""
    shape = shape_of(info)
    one = (shape.kv_heads, shape.head_dim)
    return cache_layers(info) == shape.layers and \
        all(entries == (one, one) for entries in layer_shapes(info))


def genai_stages_not(info: dict[str, Any] | None, inputs: dict[str, list[str]]) -> str | None:
    """Why a causal LM's prompt and token graphs (`inputs`: each graph's input names) cannot be
    genai pipeline stages over fixed buffers (None: they can): genai feeds a stage nothing but
    the ids, the two lengths and one buffer per layer's keys and values, all of one geometry
    (config.json's `info`; None: not checked)."""
    if info is not None and not uniform_cache(info):
        return "its layers' caches differ in geometry, which genai's decoder does not describe"
    for graph, names in inputs.items():
        extra = [n for n in names if n not in GENAI_STAGE_MAKES and
                 (not CACHE.is_past(n) or CACHE.is_state(n))]
        if extra:
            return f"the {graph} graph takes {extra[0]}, which genai's pipeline does not feed"
    return None


def lm_graph_specs(info: dict[str, Any], shapes: dict[str, Any], batch: int,
                   on_host: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """The two graphs' I/O (the module docstring). With "embeddings" on the host they take
    `inputs_embeds` (the host looks the tokens up), with "head" they return `hidden_states`
    (the host computes the logits): the vocabulary-sized matrices then stay off the target."""
    if batch != 1:
        raise ConfigError("export.shapes.batch_size: a causal LM's graphs decode one sequence "
                          "(batch 1); set export.shapes.batch_size=1")
    s = shape_of(info)
    prefill, context = lengths(info, shapes)
    outputs = ["hidden_states" if "head" in on_host else "logits",
               *cache_names(cache_layers(info), CACHE.present)]
    width = _first(info.get("text_config") or info, _WIDTH)
    top = context - 1  # positions run 0 .. context - 1
    per_part = [entry for entries in layer_shapes(info) for entry in entries]  # as the names
    past = [input_spec(n, "float32", [1, heads, context, width], -8.0, 8.0, "lm_past")
            for n, (heads, width) in zip(cache_names(cache_layers(info), CACHE.past), per_part,
                                         strict=True)]
    # a window of the prompt after the slots its earlier windows filled
    prompt = [input_spec("input_ids", "int64", [1, prefill], 0, s.vocab - 1, "lm_prompt_ids"),
              input_spec("attention_mask", "int64", [1, context + prefill], 0, 1,
                         "lm_prompt_mask"),
              input_spec("position_ids", "int64", [1, prefill], 0, top, "lm_prompt_positions"),
              *past]
    step = [input_spec("input_ids", "int64", [1, 1], 0, s.vocab - 1, "lm_step_ids"),
            input_spec("position_ids", "int64", [1, 1], 0, top, "lm_step_positions"),
            input_spec("attention_mask", "int64", [1, context + 1], 0, 1, "lm_step_mask"), *past]
    if "embeddings" in on_host:
        prompt[0] = input_spec("inputs_embeds", "float32", [1, prefill, width], -1.0, 1.0,
                          "lm_prompt_embeds")
        step[0] = input_spec("inputs_embeds", "float32", [1, 1, width], -1.0, 1.0, "lm_step_embeds")
    return {PREFILL: {"inputs": prompt, "outputs": outputs},
            DECODE: {"inputs": step, "outputs": outputs}}


def uncached_graph_specs(info: dict[str, Any], shapes: dict[str, Any],
                       batch: int) -> dict[str, dict[str, Any]]:
    """The I/O of a causal LM whose forward keeps no cache: one graph run on the whole prefix
    for each new token, its tokens from position 0 and right-padded to the context (masked:
    a causal model's logits at a token do not read the padding after it), the logits at every
    position (the host reads the last token's)."""
    if batch != 1:
        raise ConfigError("export.shapes.batch_size: a causal LM's graph decodes one sequence "
                          "(batch 1); set export.shapes.batch_size=1")
    _, context = lengths(info, shapes)
    vocab = shape_of(info).vocab
    return {UNCACHED: {"inputs": [
        input_spec("input_ids", "int64", [1, context], 0, vocab - 1, "token_ids"),
        input_spec("attention_mask", "int64", [1, context], 0, 1, "attention_mask")],
        "outputs": ["logits"]}}


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
    # an attention-free model (Mamba's) has none: its mixer's projections are sized by its
    # intermediate width, counted below
    attention = 2 * width * heads * s.head_dim + 2 * width * s.kv_heads * s.head_dim \
        if heads and s.head_dim and s.kv_heads else 0
    # one width for every layer, or one per layer (Gemma 3n's list)
    inters = [int(i) for i in inter] if isinstance(inter, list) else [int(inter)] * s.layers
    layers = s.layers * attention + gated * width * sum(inters[:s.layers])
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
