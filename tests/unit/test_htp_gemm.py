"""Gemms HTP declines (a computed C, alpha or a constant C's beta other than 1, transA) are
rewritten for it: exact on the CPU, applied once, and only there (alpha 1 with a constant C
at beta 1, or none, is kept)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_gemm import gemms_htp_takes
from executors.onnx.htp_rewrites import REWRITES

RNG = np.random.default_rng(0)
W = RNG.standard_normal((32, 64)).astype(np.float32)
C = RNG.standard_normal(64).astype(np.float32)


def gemm_model(c: str | None, beta: float = 1.0, trans_b: int = 0,
               c_shape: tuple[int, ...] = (4, 64), alpha: float = 1.0,
               trans_a: int = 0) -> onnx.ModelProto:
    """y = Gemm(Relu(x), W, C): C computed (Sigmoid of a second input of `c_shape`), a
    constant, or absent."""
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="/act")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                            [32, 4] if trans_a else [4, 32])]
    inits = [numpy_helper.from_array(W.T.copy() if trans_b else W, "w")]
    if c == "computed":
        inputs.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, list(c_shape)))
        nodes.append(helper.make_node("Sigmoid", ["x2"], ["c"], name="/c"))
    elif c == "constant":
        inits.append(numpy_helper.from_array(C, "c"))
    nodes.append(helper.make_node("Gemm", ["h", "w", "c"] if c else ["h", "w"], ["y"],
                                  name="/proj/Gemm", transA=trans_a, transB=trans_b, beta=beta,
                                  alpha=alpha))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [4, 64])], initializer=inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


def run(model: onnx.ModelProto, x: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, x)[0]


DECLINED = [  # (C, beta, transB, C's shape, alpha, transA)
    ("computed", 1.0, 0, (4, 64), 1.0, 0),  # MatMulAddFusion's
    ("computed", 0.25, 1, (4, 64), 1.0, 0),
    ("computed", 1.0, 1, (1, 64), 0.5, 0),
    ("computed", 2.0, 0, (64,), 1.0, 1),
    ("constant", 0.5, 0, (64,), 1.0, 0),
    ("constant", 1.0, 1, (64,), 3.0, 1),
    (None, 1.0, 0, (64,), 0.5, 0),
    (None, 1.0, 0, (64,), 1.0, 1),
]


def test_each_declined_gemm_is_rewritten_and_stays_exact():
    for c, beta, trans_b, c_shape, alpha, trans_a in DECLINED:
        model = gemm_model(c, beta, trans_b, c_shape, alpha, trans_a)
        x = feeds(model)
        want = run(model, x)
        assert gemms_htp_takes(model) == 1
        gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
        assert len(gemms) == 1 and len(gemms[0].input) == 2
        assert {a.name: a.i for a in gemms[0].attribute} == {"transB": trans_b}
        assert ("Transpose" in {n.op_type for n in model.graph.node}) == bool(trans_a)
        assert (model.graph.node[-1].op_type == "Add") == bool(c)
        assert model.graph.node[-1].output == ["y"]
        assert "c" not in {i.name for i in model.graph.initializer}  # folded into beta * C
        onnx.checker.check_model(model, full_check=True)
        np.testing.assert_allclose(run(model, x), want, rtol=1e-5, atol=1e-5)
        assert gemms_htp_takes(model) == 0  # idempotent


def test_what_htp_takes_is_kept():
    for c, trans_b in (("constant", 0), ("constant", 1), (None, 0), (None, 1)):
        model = gemm_model(c, trans_b=trans_b)
        before = model.SerializeToString()
        assert gemms_htp_takes(model) == 0
        assert model.SerializeToString() == before


def test_legalize_applies_it():
    assert ("gemms", gemms_htp_takes) in REWRITES
