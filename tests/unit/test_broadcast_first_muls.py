"""A Mul or Div whose second operand is computed and broadcasts to the first takes the
broadcast operand first for HTP (a Div as Mul(Div(1, s), x)): exact on the CPU (the Div within
fp32 rounding), applied once, and only there."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_math import broadcast_first_muls
from executors.onnx.htp_rewrites import REWRITES

S, H, D = 16, 4, 8


def norm_then_table(norm: str) -> onnx.ModelProto:
    """An RMSNorm without weight over x [1, H, S, D] (as `x * (1 / sqrt(...))`, `x / sqrt(...)`,
    or already `(1 / sqrt(...)) * x`), then a Mul by a rotary-like table [1, 1, S, D]."""
    table = np.cos(np.random.default_rng(3).uniform(-3, 3, [1, 1, S, D])).astype(np.float32)
    inits = [numpy_helper.from_array(table, "c"), numpy_helper.from_array(np.float32(2), "two"),
             numpy_helper.from_array(np.float32(1e-6), "eps"),
             numpy_helper.from_array(np.float32(1), "one")]
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"]),
             helper.make_node("ReduceMean", ["p"], ["m"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["m", "eps"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"])]
    if norm == "div":
        nodes.append(helper.make_node("Div", ["x", "s"], ["n"], name="/norm/Div"))
    else:
        nodes.append(helper.make_node("Div", ["one", "s"], ["r"]))
        nodes.append(helper.make_node("Mul", ["x", "r"] if norm == "mul" else ["r", "x"], ["n"],
                                      name="/norm/Mul"))
    nodes.append(helper.make_node("Mul", ["c", "n"], ["y"], name="/rotary/Mul"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, H, S, D])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, H, S, D])], initializer=inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def x() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal([1, H, S, D]).astype(np.float32)}


def run(m: onnx.ModelProto) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, x())[0]


def test_the_broadcast_operand_goes_first_and_the_output_stays():
    for norm in ("mul", "div"):
        m = norm_then_table(norm)
        want = run(m)
        assert broadcast_first_muls(m) == 1
        norm_mul = next(n for n in m.graph.node if n.output[0] == "n")
        assert norm_mul.op_type == "Mul" and norm_mul.input[1] == "x"
        onnx.checker.check_model(m, full_check=True)
        np.testing.assert_allclose(run(m), want, rtol=1e-6, atol=1e-6)
        assert broadcast_first_muls(m) == 0  # idempotent


def test_the_order_htp_computes_right_and_constants_are_kept():
    m = norm_then_table("reciprocal_first")
    before = m.SerializeToString()
    assert broadcast_first_muls(m) == 0  # and the table's Mul is constant_first_muls'
    assert m.SerializeToString() == before


def test_legalize_applies_it_after_the_outer_products():
    names = [name for name, _ in REWRITES]
    assert names.index("outer_products") < names.index("broadcast_first_muls")


def test_an_integer_div_is_kept():
    """Div(1, s) of integers truncates to 0: an integer Div is not rewritten (a Mul's operands
    commute whatever their type)."""
    graph = helper.make_graph(
        [helper.make_node("Div", ["x", "s"], ["y"], name="/int/Div")], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 4]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2, 1])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 4])])
    m = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert broadcast_first_muls(m) == 0
    assert [n.op_type for n in m.graph.node] == ["Div"]
