"""Tiny QDQ graph pairs with the same uint8 weights and different sequence lengths (the shape of
an LLM's prefill and decode graphs), activations uint16: inputs for EPContext sharing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _qdq(nodes: list, inits: list, x: str, y: str, scale: float) -> None:
    inits += [numpy_helper.from_array(np.array(scale, np.float32), f"{y}_s"),
              numpy_helper.from_array(np.array(32768, np.uint16), f"{y}_z")]
    nodes += [helper.make_node("QuantizeLinear", [x, f"{y}_s", f"{y}_z"], [f"{y}_q"]),
              helper.make_node("DequantizeLinear", [f"{y}_q", f"{y}_s", f"{y}_z"], [y])]


def matmul_graph(weights: list[np.ndarray], seq: int, name: str) -> onnx.ModelProto:
    """x [1,seq,K] -> QDQ(uint16) -> MatMul with each uint8 weight -> QDQ(uint16) -> y."""
    nodes: list = []
    inits: list = []
    _qdq(nodes, inits, "x", "x_dq", 4.0 / 65535)
    cur = "x_dq"
    for i, w in enumerate(weights):
        lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
        scale = np.float32((hi - lo) / 255)
        zero = int(np.round(-lo / scale))
        wq = np.clip(np.round(w / scale) + zero, 0, 255).astype(np.uint8)
        inits += [numpy_helper.from_array(wq, f"w{i}_q"),
                  numpy_helper.from_array(np.array(scale), f"w{i}_s"),
                  numpy_helper.from_array(np.array(zero, np.uint8), f"w{i}_z")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}_q", f"w{i}_s", f"w{i}_z"],
                                   [f"w{i}"]),
                  helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"])]
        out = "y" if i == len(weights) - 1 else f"m{i}_dq"
        _qdq(nodes, inits, f"m{i}", out, 8.0 / 65535)
        cur = out
    k, n = weights[0].shape[0], weights[-1].shape[1]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def write_pair(out_dir: Path, hidden: int = 64, inner: int = 128, seed: int = 0,
               seqs: tuple[int, int] = (8, 1)) -> list[Path]:
    """prefill.onnx and decode.onnx in `out_dir`: the same two weights, sequence lengths
    `seqs`. Weights: 2 * hidden * inner bytes."""
    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=(hidden, inner)).astype(np.float32) * 0.05,
               rng.normal(size=(inner, hidden)).astype(np.float32) * 0.05]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, seq in zip(("prefill", "decode"), seqs, strict=True):
        path = out_dir / f"{name}.onnx"
        onnx.save(matmul_graph(weights, seq, name), str(path))
        paths.append(path)
    return paths
