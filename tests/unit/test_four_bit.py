"""quant=w4a16 at plan time (valid on every target, its precision w4a16, quant.block_size in the
quantize step's params only when set, refused for 8-bit weights in one line) and the choice of
4-bit weights on a hand-made graph (MatMul, Gemm and Conv weights int4 at their output-channel
axis; a Gather table, a norm's weights and a weight shared with another op left to the 8-bit
default), and blocks made from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import four_bit
from planner.errors import ConfigError
from planner.planning import plan_from_overrides

W4 = {"kind": "qdq", "weight_type": "int4", "activation_type": "uint16", "per_channel": True,
      "profile": "cpu"}


def quantize_step(tmp_path: Path, *overrides: str) -> object:
    plan = plan_from_overrides(["model=tiny_bert", *overrides], store=str(tmp_path))
    return plan.step("quantize")


@pytest.mark.parametrize("target", ["cpu", "qnn_htp"])
def test_w4a16_plans_on_every_target(tmp_path: Path, target: str) -> None:
    step = quantize_step(tmp_path, "quant=w4a16", f"target={target}")
    assert step.params["weight_type"] == "int4" and step.params["activation_type"] == "uint16"
    assert "block_size" not in step.params  # per channel: no new param, as w8a16_pc


def test_block_size_is_a_param_only_when_set(tmp_path: Path) -> None:
    plain = quantize_step(tmp_path, "quant=w4a16", "target=qnn_htp")
    blocked = quantize_step(tmp_path, "quant=w4a16", "target=qnn_htp", "quant.block_size=32")
    assert blocked.params["block_size"] == 32 and blocked.key != plain.key
    same = quantize_step(tmp_path, "quant=w4a16", "target=qnn_htp", "quant.block_size=null")
    assert same.key == plain.key


def test_block_size_with_8bit_weights_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        quantize_step(tmp_path, "quant=w8a16_pc", "+quant.block_size=32", "target=cpu")
    assert err.value.lines == [
        "quant.block_size=32: blocks are for 4-bit weights, and quant.weight_type is uint8",
        "use quant=w4a16, or set quant.block_size=null"]


def test_the_precision_fact_says_w4a16(tmp_path: Path) -> None:
    from planner.core.ops import precision

    assert precision(quantize_step(tmp_path, "quant=w4a16", "target=cpu").params) == "w4a16"


def graph() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("LayerNormalization", ["e", "gamma", "beta"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w_mm"], ["a"]),
             helper.make_node("Gemm", ["a", "w_gemm", "bias"], ["b"], transB=1),
             helper.make_node("MatMul", ["b", "shared"], ["c"]),
             helper.make_node("Add", ["c", "shared"], ["d"]),
             helper.make_node("Conv", ["x", "w_conv"], ["y"])]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [4]),
                     helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [init("table", 10, 8), init("gamma", 8), init("beta", 8), init("w_mm", 8, 16),
         init("w_gemm", 4, 16), init("bias", 4), init("shared", 4, 4), init("w_conv", 5, 3, 3, 3)])
    return helper.make_model(g)


def test_only_the_weights_of_the_four_bit_ops_are_int4() -> None:
    got = four_bit.overrides(W4, graph(), {"int4": "I4"})
    assert got == {"w_mm": [{"quant_type": "I4", "symmetric": True, "axis": -1}],
                   "w_gemm": [{"quant_type": "I4", "symmetric": True, "axis": 0}],
                   "w_conv": [{"quant_type": "I4", "symmetric": True, "axis": 0}]}
    assert four_bit.default_weight_type(W4) == "uint8"
    assert four_bit.overrides({**W4, "weight_type": "uint8"}, graph(), {}) == {}


def test_blocks_are_made_along_the_input_axis_and_round_trip() -> None:
    w = np.random.default_rng(1).standard_normal((70, 6)).astype(np.float32)
    q, scale = four_bit._blocked(w, 0, 32)
    assert q.shape == w.shape and scale.shape == (3, 6)  # the last block is short
    assert q.min() >= -8 and q.max() <= 7
    back = q * np.repeat(scale, 32, axis=0)[:70]
    assert np.abs(back - w).max() <= scale.max() / 2 + 1e-6
    qt, st = four_bit._blocked(w.T.copy(), 1, 32)  # a Gemm weight with transB: [N, K]
    assert np.array_equal(qt, q.T) and np.allclose(st, scale.T)
