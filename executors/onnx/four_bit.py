"""4-bit weight precisions (weight_type int4): which weights are 4-bit and how. The QDQ
quantizer knows one default weight type; a 4-bit precision makes it 8-bit (what w8a16_pc gives
every weight) and names each weight of an op the target takes at 4 bits (its QdqProfile's
four_bit_ops) in ORT's tensor quant overrides: int4, symmetric (HTP reads int4 weights with a
zero point of 0 only), one scale per output channel, or per block of input rows. Embedding
tables, norms and every other weight so stay 8-bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from planner.core.ops import bits
from planner.core.targets import of_params

FALLBACK = "uint8"  # the weight type of what is not 4-bit: w8a16_pc's


def is_four_bit(p: dict[str, Any]) -> bool:
    return bits(p["weight_type"]) == 4


def default_weight_type(p: dict[str, Any]) -> str:
    """The quantizer's default weight type: the 8-bit fallback for a 4-bit precision."""
    return FALLBACK if is_four_bit(p) else p["weight_type"]


def overrides(p: dict[str, Any], model: onnx.ModelProto,
              qtype: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """TensorQuantOverrides making the 4-bit ops' weights int4 (nothing unless 4-bit)."""
    if not is_four_bit(p):
        return {}
    four_bit_ops = of_params(p).qdq.four_bit_ops
    blocked = bool(p.get("block_size"))  # per channel here; to_blocks makes the blocks
    inits = {i.name: i for i in model.graph.initializer}
    axes: dict[str, set[int | None]] = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name in inits:
                axes.setdefault(name, set()).add(
                    _axis(node) if node.op_type in four_bit_ops and k == 1 else None)
    out = {}
    for name, found in axes.items():
        tensor = inits[name]
        if len(found) != 1 or None in found or tensor.data_type != onnx.TensorProto.FLOAT \
                or len(tensor.dims) < 2:
            continue  # read by another op too, or at another axis: left 8-bit
        setting: dict[str, Any] = {"quant_type": qtype[p["weight_type"]], "symmetric": True}
        if p["per_channel"] or blocked:
            setting["axis"] = found.pop()
        out[name] = [setting]
    return out


def _axis(node: onnx.NodeProto) -> int:
    """The weight's output-channel axis: MatMul [K, N], Gemm [K, N] ([N, K] with transB),
    Conv [M, C, kH, kW]."""
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    return {"MatMul": -1, "Gemm": 0 if trans_b else 1, "Conv": 0}[node.op_type]


def to_blocks(model: onnx.ModelProto, floats: onnx.ModelProto, base: Path, p: dict[str, Any],
              settings: dict[str, list[dict[str, Any]]]) -> int:
    """Re-quantize the quantizer's per-channel int4 weights in blocks of p["block_size"] input
    rows (DequantizeLinear's block_size): ORT 1.32's BlockSize option blocks every weight,
    and refuses the 1-D ones (norms) and cannot scale a bias from blocked scales. `floats` is
    the float graph, its weights read one at a time from `base`. Returns how many weights now
    are blocked."""
    size = p.get("block_size")
    if not size:
        return 0
    inits = {i.name: i for i in model.graph.initializer}
    sources = {i.name: i for i in floats.graph.initializer}
    done = 0
    for node in model.graph.node:
        name = node.input[0].removesuffix("_quantized") if node.op_type == "DequantizeLinear" \
            else ""
        if name in settings and "axis" in settings[name][0] and name in sources and \
                len(sources[name].dims) == 2:  # a Conv's 4-bit weights stay per channel
            axis = 1 - settings[name][0]["axis"] % 2  # the input axis of a 2-D weight
            q, scale = _blocked(onnx.numpy_helper.to_array(sources[name], str(base)), axis,
                                size)
            _replace(inits[node.input[0]], q)
            inits[node.input[1]].CopyFrom(onnx.numpy_helper.from_array(scale, node.input[1]))
            _replace(inits[node.input[2]], np.zeros(scale.shape, np.int8))
            del node.attribute[:]
            node.attribute.extend([onnx.helper.make_attribute("axis", axis),
                                   onnx.helper.make_attribute("block_size", size)])
            done += 1
    return done


def _blocked(w: np.ndarray, axis: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int4 values and float scales of a 2-D weight, one scale per `size` entries
    along `axis` (the last block may be short)."""
    moved = np.moveaxis(w, axis, 0)
    n = -(-moved.shape[0] // size)
    padded = np.pad(moved, ((0, n * size - moved.shape[0]), (0, 0)))
    scale = np.abs(padded.reshape(n, size, -1)).max(axis=1) / 7.0
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    q = np.clip(np.rint(moved / np.repeat(scale, size, axis=0)[:moved.shape[0]]), -8, 7)
    return np.moveaxis(q.astype(np.int8), 0, axis), np.moveaxis(scale, 0, axis)


def _replace(tensor: onnx.TensorProto, values: np.ndarray) -> None:
    """`tensor` (INT4) holding `values`, packed two to a byte, in the model itself."""
    from onnxruntime.quantization.quant_utils import pack_bytes_to_4bit

    packed = bytes(pack_bytes_to_4bit(np.ascontiguousarray(values).tobytes()))
    tensor.CopyFrom(onnx.helper.make_tensor(tensor.name, onnx.TensorProto.INT4,
                                            list(values.shape), packed, raw=True))
