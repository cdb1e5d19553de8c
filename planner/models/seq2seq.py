"""The cached decoder of an encoder-decoder model, derived at plan time from config.json: a
`cross` graph computes every decoder layer's cross-attention keys and values from the
encoder's states once per input, and the `decoder` graph decodes one token from its position,
`decoder_sequence_length` cache slots per layer (the empty ones masked) and the cross keys and
values, returning the logits and the token's own keys and values, which the host writes into
slot `position`; onnxruntime-genai's Whisper layout of those graphs; the decoder's start and
special tokens; and export.generate_loop's parameters."""

from __future__ import annotations

from typing import Any

from planner.errors import ConfigError
from planner.models.generation import cache_names, input_spec
from planner.models.roles import CACHE, CROSS, DECODER, ENCODER, FIRST_PAST

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
    past = [input_spec(n, "float32", [1, heads, slots, head_dim], -8.0, 8.0, "s2s_past")
            for n in cache_names(layers, CACHE.past)]
    kv = [input_spec(n, "float32", [1, heads, enc_seq, head_dim], -8.0, 8.0, "s2s_cross")
          for n in cross_kv]
    step = [input_spec("input_ids", "int64", [1, 1], 0, vocab - 1, "s2s_step_ids"),
            input_spec("position_ids", "int64", [1, 1], 0, slots - 1, "s2s_positions"),
            input_spec("attention_mask", "int64", [1, slots + 1], 0, 1, "s2s_mask"),
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
