"""4-bit weight precisions (weight_type int4): which weights are 4-bit and how. The QDQ
quantizer knows one default weight type; a 4-bit precision makes it 8-bit (what w8a16_pc gives
every weight) and names each weight of an op the target takes at 4 bits (its QdqProfile's
four_bit_ops) in ORT's tensor quant overrides: int4, symmetric (HTP reads int4 weights with a
zero point of 0 only), one scale per output channel, or per block of input rows. Embedding
tables, norms and every other weight so stay 8-bit."""

from __future__ import annotations

from typing import Any

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
    ops = of_params(p).qdq.four_bit_ops
    blocked = bool(p.get("block_size"))
    inits = {i.name: i for i in model.graph.initializer}
    axes: dict[str, set[int | None]] = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name in inits:
                axes.setdefault(name, set()).add(
                    _axis(node, blocked) if node.op_type in ops and k == 1 else None)
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


def _axis(node: onnx.NodeProto, blocked: bool) -> int:
    """The weight's output-channel axis, or with blocks its input (reduction) axis: MatMul
    [K, N], Gemm [K, N] ([N, K] with transB), Conv [M, C, kH, kW]."""
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    output_axis = {"MatMul": -1, "Gemm": 0 if trans_b else 1, "Conv": 0}[node.op_type]
    input_axis = {"MatMul": -2, "Gemm": 1 if trans_b else 0, "Conv": 1}[node.op_type]
    return input_axis if blocked else output_axis


def extra_options(p: dict[str, Any]) -> dict[str, Any]:
    """The quantizer's options for weights in blocks: the block size, and biases left float
    (ORT 1.32 cannot scale a bias from a blocked weight's two-dimensional scales)."""
    size = p.get("block_size")
    return {"BlockSize": size, "QuantizeBias": False} if size else {}
