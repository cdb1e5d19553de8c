"""The pure graph transforms, on small real graphs: the mask Where rewrite, hierarchy
assignment after fusion and quantization, and the basic-optimization fixed point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import hierarchy
from executors.onnx.htp_rewrites import (
    FLOOR,
    clamp_constants,
    mask_wheres,
    rewrite_mask_wheres,
)
from executors.onnx.legality import violations
from executors.runtime.ortopt import basic_fixed_point, basic_pass_changes, structure_digest

FMIN = float(np.finfo(np.float32).min)


def mask_model() -> onnx.ModelProto:
    """scores + Where(mask, 0, float-min): the additive attention mask of an HF export."""
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 4])
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(FMIN, np.float32), "minus")]
    nodes = [helper.make_node("Where", ["mask", "zero", "minus"], ["bias"], name="/m/Where"),
             helper.make_node("Add", ["scores", "bias"], ["out"], name="/m/Add")]
    graph = helper.make_graph(nodes, "mask", [scores, mask], [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


def test_mask_where_becomes_arithmetic_with_the_same_softmax() -> None:
    model = mask_model()
    feed = {"scores": np.array([[0.5, -1.0, 2.0, 0.1]], np.float32),
            "mask": np.array([[True, True, False, False]])}
    before = run(model, feed)
    assert len(mask_wheres(model)) == 1 and violations(model, "qnn_htp")
    assert rewrite_mask_wheres(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Cast", "Mul", "Add", "Add"]
    onnx.checker.check_model(model, full_check=True)
    after = run(model, feed)
    keep = feed["mask"]
    np.testing.assert_allclose(after[keep], before[keep])  # real tokens: unchanged
    assert np.all(after[~keep] <= FLOOR + 2.0)  # masked: finite, far below the real scores

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max())
        return e / e.sum()
    np.testing.assert_allclose(softmax(after[0]), softmax(before[0]), atol=1e-12)
    assert not mask_wheres(model)
    assert violations(model, "qnn_htp") == ["mask constant 'minus' at or below -1e+30"]
    assert clamp_constants(model) == 1  # legalize clamps what the rewrite left unused
    assert violations(model, "qnn_htp") == []


def test_hierarchy_assignment_after_fusion_and_quantization() -> None:
    meta = {"prefix": "model", "root": "/M",
            "scopes": {"": "/M", "enc": "/M/Enc", "enc.ff": "/M/Enc/FF"},
            "nodes": {"/model/enc/ff/MatMul": {"tag": "/M/Enc/FF", "match": "direct"}}}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_in"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_in"),
        helper.make_node("MatMul", ["xd", "w"], ["h"], name="/model/enc/ff/MatMul"),
        helper.make_node("Gelu", ["h"], ["g"], name="fused_gelu_1"),       # fusion-made
        helper.make_node("Add", ["g", "b"], ["a"], name="/model/enc/ff/act/Add"),  # scope only
        helper.make_node("Relu", ["a"], ["y"], name="unnamed_relu"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y])
    tags = hierarchy.assign(graph, meta)
    how = {n.name: t for n, t in zip(graph.node, tags, strict=True)}
    assert how["/model/enc/ff/MatMul"] == ("/M/Enc/FF", "export")
    assert how["/model/enc/ff/act/Add"] == ("/M/Enc/FF", "scope")  # nearest traced ancestor
    assert how["fused_gelu_1"] == ("/M/Enc/FF", "neighbours")
    assert how["unnamed_relu"] == ("/M/Enc/FF", "neighbours")
    assert how["q_in"] == ("/M/Enc/FF", "qdq") and how["dq_in"] == ("/M/Enc/FF", "qdq")
    assert hierarchy.common_tag(["/M/Enc/FF", "/M/Enc/Attn"]) == "/M/Enc"
    assert hierarchy.common_tag(["/A", "/B"]) is None


def test_basic_fixed_point_converges_and_is_observed(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    inits = [numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
             numpy_helper.from_array(np.ones(4, np.float32), "b")]
    nodes = [helper.make_node("Identity", ["x"], ["i1"], name="id1"),
             helper.make_node("Identity", ["i1"], ["i2"], name="id2"),
             helper.make_node("MatMul", ["i2", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "raw.onnx"
    onnx.save(model, str(path))
    assert basic_pass_changes(path) is not None  # the Identities and MatMul+Add remain
    (tmp_path / "work").mkdir()
    result, passes = basic_fixed_point(model, tmp_path / "work")
    assert passes >= 1 and not list((tmp_path / "work").iterdir())
    assert [n.op_type for n in result.graph.node] == ["Gemm"]  # MatMulAddFusion is basic
    out = tmp_path / "fixed.onnx"
    onnx.save(result, str(out))
    assert basic_pass_changes(out) is None
    again, more = basic_fixed_point(result, tmp_path / "work")
    assert more == 0 and structure_digest(again) == structure_digest(result)
    feed = {"x": np.arange(4, dtype=np.float32)[None]}
    np.testing.assert_allclose(run(result, feed), run(model, feed), rtol=1e-6)


def test_the_weights_graph_rewrites_leave_in_their_files_are_tables_and_matmul_weights() -> None:
    """matmul_weights: what only feeds a MatMul/Gemm/Conv weight input or a Gather's table;
    an initializer any other input also reads (a shape, indices, a bias) is read in."""
    from executors.store.weights import matmul_weights

    def init(name: str, shape: tuple[int, ...], dtype: type = np.float32) -> TensorProto:
        return numpy_helper.from_array(np.zeros(shape, dtype), name)

    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 8])
    inits = [init("table", (100, 8)), init("w", (8, 8)), init("shared", (8, 8)),
             init("rows", (3,), np.int64), init("bias", (8,))]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("Gather", ["shared", "rows"], ["picked"]),  # a table...
             helper.make_node("MatMul", ["emb", "w"], ["h"]),
             helper.make_node("MatMul", ["h", "shared"], ["h2"]),  # ...and a weight
             helper.make_node("Add", ["h2", "bias"], ["h3"]),
             helper.make_node("Add", ["h3", "shared"], ["out"])]  # ...and read by an Add
    graph = helper.make_graph(nodes, "g", [ids], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert matmul_weights(model) == {"table", "w"}
