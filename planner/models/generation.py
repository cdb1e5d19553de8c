"""The graphs of a generating model over a static key/value cache, derived at plan time from
config.json (planner/models/roles.py declares their roles and the cache's names).

A causal LM (decoder-only): the prefill graph reads a prompt of `export.shapes.prefill_length`
tokens; the decode graph reads one token, its position, and `context_length` cache slots per
layer. Both return the logits and the new tokens' keys and values only ("present"): the host
writes them into its cache buffer, so no graph scatters into a tensor and every shape is fixed.
Names follow onnxruntime-genai's conventions (`past_key_values.{i}.key`, `present.{i}.key`).

An encoder-decoder with the cached decoder (`export.shapes.decoder_cache=true`): besides the
encoder, a `cross` graph computes every decoder layer's cross-attention keys and values from
the encoder's states once per input, and the `decoder` graph decodes one token from its
position, `decoder_sequence_length` cache slots per layer (the empty ones masked) and the cross
keys and values; it returns the logits and the token's own keys and values, which the host
writes into slot `position`: the cost of a token does not grow with the prefix (the uncached
decoder recomputes the whole prefix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import ConfigError
from planner.models.roles import CACHE, CROSS, DECODE, DECODER, ENCODER, FIRST_PAST, PREFILL

# onnxruntime-genai's model types a causal LM's bundle is written as: its plain decoder (one
# graph of a free past, present = past + new) and its pipeline of graphs
GENAI_DECODER, GENAI_PIPELINE = "decoder", "decoder-pipeline"
GENAI_SECTION = "decoder"  # genai_config.json's model section that describes those graphs
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
                                        ("num_attention_heads", heads),
                                        ("hidden_size", width), ("vocab_size", vocab))
               if not value]
    if missing:
        raise ConfigError(f"model: the checkpoint's config.json has no {', '.join(missing)} "
                          f"(model_type {info.get('model_type')!r}); a causal LM's key/value "
                          "cache is derived from them: add them to config.json"
                          + ("" if heads else "; a model without attention layers (recurrent or "
                             "state-space, as Mamba's) keeps a state that cache does not hold, "
                             "and is not supported"))
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
    size, and the cache slots it covers. Mistral's `sliding_window` covers as many; GPT-Neo's
    `window_size` one less: its local mask is cut from a bias over key indices, where a step's
    token, after the slots, is at index context_length."""
    text = info.get("text_config") or info
    if text.get("use_sliding_window") is False:
        return None
    for field, reach in (("sliding_window", 0), ("window_size", 1)):
        if isinstance(text.get(field), int):
            return field, text[field], text[field] - reach
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
    0 .. context_length - 1."""
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
    return prefill, context


def cache_names(layers: int, prefix: str) -> list[str]:
    return CACHE.names(prefix, layers)


def _spec(name: str, dtype: str, shape: list[int], lo: float, hi: float,
          kind: str) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "min": lo, "max": hi, "kind": kind}


HOST_LAYERS = ("embeddings", "head")  # what export.on_host may place on the host CPU


def lm_graph_specs(info: dict[str, Any], shapes: dict[str, Any], batch: int,
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
               *cache_names(cache_layers(info), CACHE.present)]
    width = _first(info.get("text_config") or info, _WIDTH)
    top = context - 1  # positions run 0 .. context - 1
    prompt = [_spec("input_ids", "int64", [1, prefill], 0, s.vocab - 1, "lm_prompt_ids"),
              _spec("attention_mask", "int64", [1, prefill], 0, 1, "lm_prompt_mask"),
              _spec("position_ids", "int64", [1, prefill], 0, top, "lm_prompt_positions")]
    per_part = [entry for entries in layer_shapes(info) for entry in entries]  # as the names
    past = [_spec(n, "float32", [1, heads, context, width], -8.0, 8.0, "lm_past")
            for n, (heads, width) in zip(cache_names(cache_layers(info), CACHE.past), per_part,
                                         strict=True)]
    step = [_spec("input_ids", "int64", [1, 1], 0, s.vocab - 1, "lm_step_ids"),
            _spec("position_ids", "int64", [1, 1], 0, top, "lm_step_positions"),
            _spec("attention_mask", "int64", [1, context + 1], 0, 1, "lm_step_mask"), *past]
    if "embeddings" in on_host:
        prompt[0] = _spec("inputs_embeds", "float32", [1, prefill, width], -1.0, 1.0,
                          "lm_prompt_embeds")
        step[0] = _spec("inputs_embeds", "float32", [1, 1, width], -1.0, 1.0, "lm_step_embeds")
    return {PREFILL: {"inputs": prompt, "outputs": outputs},
            DECODE: {"inputs": step, "outputs": outputs}}


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


# -- encoder-decoders --------------------------------------------------------------------------
LOOP_FILE = "generate_loop.onnx"  # export.generate_loop's graph, beside the deliverable


# the families the cached decoder is measured on (tokens equal to the uncached decoder's and to
# transformers' generate on the CPU, every graph compiled for HTP): by the model's type, or a
# vision encoder-decoder's decoder's
MEASURED = frozenset({"bart", "marian", "t5", "whisper", "blip"})
MEASURED_DECODERS = frozenset({"bert"})


def cached(info: dict[str, Any], wanted: bool | None) -> bool:
    """export.shapes.decoder_cache: as set, or (null) for the families it is measured on."""
    if wanted is not None:
        return wanted
    decoder = (info.get("decoder") or {}).get("model_type")
    if info.get("model_type") not in MEASURED and decoder not in MEASURED_DECODERS:
        return False
    try:
        decoder_shape(info)
    except ConfigError:  # its config.json does not say the decoder's shape: the plain decoder
        return False
    return True


def decoder_config(info: dict[str, Any]) -> dict[str, Any]:
    """The decoder's part of config.json: a vision-encoder-decoder's `decoder`, a captioner's
    text model (BLIP's `text_config`), else the whole config (BART, Marian, Whisper, T5)."""
    return info.get("decoder") or info.get("text_config") or info


def decoder_shape(info: dict[str, Any]) -> tuple[int, int, int]:
    """(layers, heads, head width) of the decoder's self-attention, from config.json: BART-
    and T5-like encoder-decoders, and the BERT-, GPT-2- or TrOCR-like decoder of a vision
    encoder-decoder or a captioner."""
    dec = decoder_config(info)
    layers = _first_int(dec, "decoder_layers", "num_decoder_layers", "num_layers",
                    "num_hidden_layers", "n_layer")
    heads = _first_int(dec, "decoder_attention_heads", "num_heads", "num_attention_heads", "n_head")
    width = _first_int(dec, "d_model", "hidden_size", "n_embd")
    head_dim = _first_int(dec, "d_kv") or (width // heads if width and heads else None)
    if not (layers and heads and head_dim):
        raise ConfigError(f"export.shapes.decoder_cache: config.json does not say the decoder's "
                          f"layers, heads and width (model_type {info.get('model_type')!r}); set "
                          "export.shapes.decoder_cache=false")
    return int(layers), int(heads), int(head_dim)


def _first_int(config: dict[str, Any], *keys: str) -> int | None:
    return next((int(config[k]) for k in keys if isinstance(config.get(k), int)), None)


def special_token(info: dict[str, Any], name: str) -> int | None:
    """A special token id from config.json, else from its decoder's (or text model's) config;
    the first of several."""
    value = info.get(name)
    for part in ("decoder", "text_config"):
        if value is None:
            value = (info.get(part) or {}).get(name)
    if isinstance(value, list):  # several eos ids: the first
        value = value[0] if value else None
    return None if value is None else int(value)


def start_token(info: dict[str, Any]) -> int | None:
    """The token a decoder starts from: decoder_start_token_id (of the config, its decoder's or
    its text model's), else the text model's bos (BLIP), else the config's bos."""
    parts = (info, info.get("decoder") or {}, info.get("text_config") or {})
    for key in ("decoder_start_token_id", "bos_token_id"):
        for part in parts:
            if isinstance(part.get(key), int):
                return int(part[key])
    return None


def cached_graphs(info: dict[str, Any], states: dict[str, Any], cross: list[dict[str, Any]],
                  slots: int, vocab: int, outputs: list[str]) -> dict[str, dict[str, Any]]:
    layers, heads, head_dim = decoder_shape(info)
    enc_seq = states["shape"][1]
    cross_kv = cache_names(layers, CACHE.cross)
    present = cache_names(layers, CACHE.present)
    past = [_spec(n, "float32", [1, heads, slots, head_dim], -8.0, 8.0, "s2s_past")
            for n in cache_names(layers, CACHE.past)]
    kv = [_spec(n, "float32", [1, heads, enc_seq, head_dim], -8.0, 8.0, "s2s_cross")
          for n in cross_kv]
    step = [_spec("input_ids", "int64", [1, 1], 0, vocab - 1, "s2s_step_ids"),
            _spec("position_ids", "int64", [1, 1], 0, slots - 1, "s2s_positions"),
            _spec("attention_mask", "int64", [1, slots + 1], 0, 1, "s2s_mask"),
            *cross, *past, *kv]
    # the cross keys and values do not read the encoder's mask (the step does)
    return {CROSS: {"inputs": [states], "outputs": cross_kv},
            DECODER: {"inputs": step, "outputs": [outputs[0], *present]}}


def genai_layout(graphs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The cached decoder's graphs in onnxruntime-genai's Whisper layout: the encoder also gives
    every layer's cross keys and values (no cross graph: genai runs two sessions), and the
    decoder reads a free past (any number of new tokens after it, their positions counted from
    the past's length inside the graph: no position ids, no mask) and gives back past + new."""
    out = {g: dict(spec) for g, spec in graphs.items() if g != CROSS}
    out[ENCODER]["outputs"] = [*graphs[ENCODER]["outputs"], *graphs[CROSS]["outputs"]]
    out[DECODER]["inputs"] = [s for s in graphs[DECODER]["inputs"]
                              if s["name"] not in ("position_ids", "attention_mask")]
    out[DECODER]["dynamic"] = True
    return out


def loop_params(config: dict[str, Any], known: dict[str, Any],
                compiles: bool) -> dict[str, Any] | None:
    """export.generate_loop=true: the params of the step that exports an encoder-decoder's
    greedy decoding as one ONNX graph with a Loop, for the CPU (None when it is off)."""
    ex = config["export"]
    if not ex["generate_loop"]:
        return None
    graphs = known["graphs"]
    if ENCODER not in graphs or DECODER not in graphs:
        raise ConfigError(f"export.generate_loop=true: the loop graph is built for "
                          f"encoder-decoder models, and this is a {known['modality']} model; "
                          "set export.generate_loop=false")
    if compiles:
        raise ConfigError(f"export.generate_loop=true: the loop graph runs on the CPU; target "
                          f"{config['target']['name']} compiles graphs without a Loop; set "
                          "target=cpu or export.generate_loop=false")
    decoder = {s["name"]: s for s in graphs[DECODER]["inputs"]}
    length = decoder["attention_mask"]["shape"][1] - 1 if FIRST_PAST in decoder \
        else decoder["input_ids"]["shape"][1]
    info = known["info"]
    pad = decoder_config(info).get("pad_token_id", info.get("pad_token_id"))
    return {"encoder_inputs": graphs[ENCODER]["inputs"], "decoder_length": int(length),
            "start": start_token(info) or 0, "pad": int(pad) if isinstance(pad, int) else 0,
            "masked": any(s["name"] == "attention_mask" for s in graphs[ENCODER]["inputs"]),
            "opset": ex["opset"]}
