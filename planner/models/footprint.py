"""How big a checkpoint's weights are, known before anything loads them: its weight files'
sizes and dtype when it has files, else its parameters counted from config.json (widths,
layers, intermediate size, vocabulary, heads). What a build's memory is planned from
(planner/core/memory.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.models.specs import weights_dtype

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1}
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "*.pt", "*.pth")
NOT_WEIGHTS = (".json", ".txt", ".md", ".py")  # beside an ONNX file: not its external data

_WIDTH = ("hidden_size", "n_embd", "d_model", "dim")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_DECODER_LAYERS = ("num_decoder_layers", "decoder_layers")
_ENCODER_LAYERS = ("encoder_layers",)
_INTER = ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim", "hidden_dim")
_GATED = ("silu", "swish", "swiglu", "geglu")


@dataclass(frozen=True)
class Weights:
    """A checkpoint's weights: `params` parameters, `stored` bytes in `dtype` as saved;
    `basis` says where the figures come from."""

    params: int
    stored: int
    dtype: str
    basis: str

    @property
    def fp32(self) -> int:
        return self.params * 4

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "stored": self.stored, "dtype": self.dtype,
                "basis": self.basis}


def read(info: dict[str, Any], where: Path | None) -> Weights | None:
    """The weights of the checkpoint at `where` (a folder, or an ONNX file) with config.json
    `info`; None when neither its files nor its config say how many there are."""
    dtype = weights_dtype(info) or "float32"
    width = BYTES.get(dtype, 4)
    if where is not None and where.is_file():  # an ONNX file: its folder holds its data
        size = sum(p.stat().st_size for p in where.parent.rglob("*")
                   if p.is_file() and p.suffix not in NOT_WEIGHTS)
        return Weights(size // 4, size, "float32", f"{where.name} and the files beside it")
    stored = _sizes(where, WEIGHT_FILES) if where is not None else 0
    if stored:
        return Weights(stored // width, stored, dtype, "weight files")
    params = count_params(info)
    if params is None:
        return None
    return Weights(params, params * width, dtype, "config.json")


def _sizes(folder: Path, patterns: tuple[str, ...]) -> int:
    found = {p for pattern in patterns for p in folder.glob(pattern) if p.is_file()}
    return sum(p.stat().st_size for p in found)


def _first(config: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    return next((config[k] for k in keys if isinstance(config.get(k), int)), None)


def count_params(info: dict[str, Any]) -> int | None:
    """Parameters of a transformer from its config.json: per layer the attention's four
    projections (fewer key/value heads counted) and the MLP (three matrices when gated), a
    decoder layer's cross-attention too, plus the token table (and an untied head) and a
    position table where positions are not rotary. None when the config names no width or no layers."""
    config = info.get("text_config") or info
    width = _first(config, _WIDTH)
    encoder = _first(config, _ENCODER_LAYERS)
    layers = _first(config, _LAYERS) or encoder
    if not width or not layers:
        return None
    decoders = _first(config, _DECODER_LAYERS) or (layers if info.get("is_encoder_decoder")
                                                   else 0)
    if encoder and decoders:
        layers = encoder
    heads = _first(config, ("num_attention_heads", "n_head", "num_heads")) or 1
    head_dim = _first(config, ("head_dim", "d_kv")) or width // heads
    kv_heads = _first(config, ("num_key_value_heads",)) or heads
    inter = _first(config, _INTER) or 4 * width
    gated = config.get("hidden_act") in _GATED or config.get("feed_forward_proj") in _GATED
    attention = 2 * width * heads * head_dim + 2 * width * kv_heads * head_dim
    mlp = (3 if gated else 2) * width * inter
    vocab = config.get("vocab_size") if isinstance(config.get("vocab_size"), int) else 0
    rotary = any(k.startswith(("rope", "rotary")) for k in config)  # no position table
    positions = 0 if rotary else _first(config, ("max_position_embeddings", "n_positions")) or 0
    tied = config.get("tie_word_embeddings", True)
    tables = vocab * width * (1 if tied else 2) + positions * width
    return (layers * (attention + mlp) + decoders * (2 * attention + mlp) + tables)
