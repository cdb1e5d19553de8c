"""Per-module accuracy on a hand-made QDQ graph: which tensors are a module's outputs (seen
through Q/DQ pairs, parents the union of children), and SQNR and cosine against numpy."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.diagnosis import module_error
from executors.onnx.artifacts import TAG_KEY

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((4, 4)).astype(np.float32)
W2 = RNG.standard_normal((4, 3)).astype(np.float32)
TAGS = {"mm1": "/M/A", "relu": "/M/A", "mm2": "/M/B"}


def _node(op: str, ins: list[str], outs: list[str], name: str, tag: str | None) -> onnx.NodeProto:
    node = helper.make_node(op, ins, outs, name=name)
    if tag:
        node.metadata_props.add(key=TAG_KEY, value=tag)
    return node


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def fp32_model() -> onnx.ModelProto:
    return _model([_node("MatMul", ["X", "W1"], ["h"], "mm1", None),
                   _node("Relu", ["h"], ["r"], "relu", None),
                   _node("MatMul", ["r", "W2"], ["Y"], "mm2", None)],
                  [numpy_helper.from_array(W1, "W1"), numpy_helper.from_array(W2, "W2")])


def _qdq(tensor: str, scale: str, tag: str) -> list[onnx.NodeProto]:
    return [_node("QuantizeLinear", [tensor, scale, "zp"], [f"{tensor}_q"], f"{tensor}_Q", tag),
            _node("DequantizeLinear", [f"{tensor}_q", scale, "zp"], [f"{tensor}_dq"],
                  f"{tensor}_DQ", tag)]


def qdq_model() -> onnx.ModelProto:
    """X, h and r each pass through a Q/DQ pair; r's scale is coarse (the loss is in /M/A)."""
    nodes = [*_qdq("X", "s_fine", "/M/A"),
             _node("MatMul", ["X_dq", "W1"], ["h"], "mm1", TAGS["mm1"]),
             *_qdq("h", "s_fine", "/M/A"),
             _node("Relu", ["h_dq"], ["r"], "relu", TAGS["relu"]),
             *_qdq("r", "s_coarse", "/M/A"),
             _node("MatMul", ["r_dq", "W2"], ["Y"], "mm2", TAGS["mm2"])]
    inits = [numpy_helper.from_array(W1, "W1"), numpy_helper.from_array(W2, "W2"),
             numpy_helper.from_array(np.array(0.02, np.float32), "s_fine"),
             numpy_helper.from_array(np.array(0.5, np.float32), "s_coarse"),
             numpy_helper.from_array(np.array(0, np.int8), "zp")]
    return _model(nodes, inits)


def _fake_quant(x: np.ndarray, scale: float) -> np.ndarray:
    return (np.clip(np.round(x / scale), -128, 127) * scale).astype(np.float32)


def _reference(x: np.ndarray) -> dict[str, np.ndarray]:
    h = x @ W1
    r = np.maximum(h, 0)
    return {"h": h, "r": r, "Y": r @ W2}


def _quantized(x: np.ndarray) -> dict[str, np.ndarray]:
    h = _fake_quant(x, 0.02) @ W1
    r = np.maximum(_fake_quant(h, 0.02), 0)
    return {"h": h, "r": r, "Y": _fake_quant(r, 0.5) @ W2}


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    return 10 * math.log10(float((ref.astype(np.float64) ** 2).sum())
                           / float(((ref.astype(np.float64) - got) ** 2).sum()))


def test_common_tensors_leave_out_qdq_copies() -> None:
    assert module_error.common_tensors(fp32_model(), qdq_model()) == {"h": "h", "r": "r", "Y": "Y"}


def test_module_outputs_see_through_qdq_and_parents_union_children() -> None:
    outs, nodes = module_error.module_outputs(qdq_model(), ["h", "r", "Y"])
    assert outs == {"/M/A": ["r"], "/M/B": ["Y"], "/M": ["Y"]}
    assert nodes == {"/M": 9, "/M/A": 8, "/M/B": 1}


def test_lineage_and_class() -> None:
    assert module_error.lineage("/Bert/Enc/Layer.0") == ["/Bert", "/Bert/Enc", "/Bert/Enc/Layer.0"]
    assert module_error.class_of("/Bert/Enc/Layer.0") == "Layer"
    assert module_error.lineage(module_error.UNTAGGED) == [module_error.UNTAGGED]


def test_sqnr_and_cosine_match_numpy() -> None:
    rng = np.random.default_rng(2)
    feeds = [{"X": rng.standard_normal((2, 4)).astype(np.float32)} for _ in range(3)]
    result = module_error.compare(fp32_model(), qdq_model(), feeds)
    rows = {r["tag"]: r for r in result["modules"]}
    assert set(rows) == {"/M", "/M/A", "/M/B"}
    refs = [_reference(f["X"]) for f in feeds]
    gots = [_quantized(f["X"]) for f in feeds]
    for tag, tensor in (("/M/A", "r"), ("/M/B", "Y"), ("/M", "Y")):
        ref = np.concatenate([r[tensor].ravel() for r in refs])
        got = np.concatenate([g[tensor].ravel() for g in gots])
        assert math.isclose(rows[tag]["sqnr_db"], _sqnr(ref, got), rel_tol=1e-4)
        cos = float(ref @ got / np.linalg.norm(ref) / np.linalg.norm(got))
        assert math.isclose(rows[tag]["cosine"], cos, rel_tol=1e-6)
    assert rows["/M/A"]["class"] == "A" and rows["/M"]["outputs"] == 1
    assert result["graph"]["sqnr_db"] == rows["/M"]["sqnr_db"]


def test_an_output_the_quantizer_renamed_is_compared_under_its_fp32_name() -> None:
    """The quantizer names an op's output anew when its Q -> DQ copy takes the graph output's
    name: the op's output is compared with the fp32 graph output, and is /M/B's output."""
    qdq = qdq_model()
    mm2 = next(n for n in qdq.graph.node if n.name == "mm2")
    mm2.output[0] = "Y_pre"
    qdq.graph.node.extend([
        _node("QuantizeLinear", ["Y_pre", "s_fine", "zp"], ["Y_q"], "Y_Q", "/M/B"),
        _node("DequantizeLinear", ["Y_q", "s_fine", "zp"], ["Y"], "Y_DQ", "/M/B")])
    assert module_error.common_tensors(fp32_model(), qdq) == {"h": "h", "r": "r", "Y_pre": "Y"}
    feeds = [{"X": np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)}]
    result = module_error.compare(fp32_model(), qdq, feeds)
    rows = {r["tag"]: r for r in result["modules"]}
    assert set(rows) == {"/M", "/M/A", "/M/B"} and rows["/M/B"]["outputs"] == 1
    assert result["graph"]["sqnr_db"] < rows["/M/B"]["sqnr_db"]  # the output's own Q/DQ adds


def test_stats_edge_cases() -> None:
    exact = module_error.Stats()
    exact.add(np.ones(3), np.ones(3))
    assert exact.sqnr_db() == math.inf and exact.cosine() == 1.0
    silent = module_error.Stats()
    silent.add(np.zeros(3), np.zeros(3))
    assert silent.cosine() == 1.0


def test_own_error_is_the_module_fed_the_fp32_values_and_the_rest_is_inherited() -> None:
    """/M/B's piece (the coarse Q/DQ on its input r, then its MatMul) is fed the fp32 r: its
    own error is that quantization alone; its cumulative figure also carries /M/A's."""
    rng = np.random.default_rng(3)
    feeds = [{"X": rng.standard_normal((2, 4)).astype(np.float32)} for _ in range(3)]
    rows = {r["tag"]: r for r in module_error.compare(fp32_model(), qdq_model(), feeds)["modules"]}
    refs = [_reference(f["X"]) for f in feeds]
    ref = np.concatenate([r["Y"].ravel() for r in refs])
    own_b = np.concatenate([(_fake_quant(r["r"], 0.5) @ W2).ravel() for r in refs])
    b = rows["/M/B"]
    assert math.isclose(b["own_sqnr_db"], _sqnr(ref, own_b), rel_tol=1e-4)
    assert math.isclose(b["inherited"], b["own_sqnr_db"] - b["sqnr_db"], rel_tol=1e-9)
    assert b["inherited"] > 0 and b["own_sqnr_db"] > b["sqnr_db"]
    # /M/A reads the graph input: nothing to inherit; the root's piece is the whole graph
    assert math.isclose(rows["/M/A"]["own_sqnr_db"], rows["/M/A"]["sqnr_db"], rel_tol=1e-6)
    assert math.isclose(rows["/M"]["own_sqnr_db"], rows["/M"]["sqnr_db"], rel_tol=1e-6)
    assert "qdq_fed" not in b


def test_own_error_on_dequantized_inputs_drops_only_the_q_dq_of_other_modules() -> None:
    """As the search reads it: /M/B's input r is quantized by /M/A's Q/DQ, which raising /M/B
    leaves as it is; fed the fp32 r past it, /M/B (a float MatMul) adds no error. /M/A owns the
    Q/DQ on its input X: it stays in its piece, whose error is the same either way."""
    rng = np.random.default_rng(5)
    feeds = [{"X": rng.standard_normal((2, 4)).astype(np.float32)} for _ in range(2)]
    figures = {}
    for inputs in ("quantized", "dequantized"):
        pieces = module_error.own_pieces(fp32_model(), qdq_model(), feeds, ["/M/A", "/M/B"], inputs)
        figures[inputs] = {p.tag: module_error.own_fields(p, 0.0)["own_sqnr_db"] for p in pieces}
        b = next(p for p in pieces if p.tag == "/M/B")
        assert b.feeds == {("r_dq" if inputs == "dequantized" else "r"): ("fp32", "r")}
    assert math.isfinite(figures["quantized"]["/M/B"]) and figures["dequantized"]["/M/B"] == math.inf
    assert figures["quantized"]["/M/A"] == figures["dequantized"]["/M/A"] < math.inf


def test_own_error_only_for_the_modules_asked() -> None:
    feeds = [{"X": np.ones((2, 4), np.float32)}]
    rows = {r["tag"]: r for r in module_error.compare(fp32_model(), qdq_model(), feeds,
                                                  own=["/M/B"])["modules"]}
    assert "own_sqnr_db" in rows["/M/B"] and "own_sqnr_db" not in rows["/M/A"]
    rows = module_error.compare(fp32_model(), qdq_model(), feeds, own=False)["modules"]
    assert not any("own_sqnr_db" in r for r in rows)


def _plan() -> dict:
    steps = [("resolve", "resolve", {}), ("export", "export", {"model": "resolve"}),
             ("normalize", "normalize", {"model": "export"}),
             ("quantize", "quantize", {"model": "normalize", "source": "resolve"}),
             ("tag", "tag", {"model": "quantize", "hierarchy": "export"}),
             ("compile", "compile", {"model": "tag"}),
             ("eval", "eval", {"candidate": "compile", "reference": "normalize",
                               "source": "resolve"})]
    return {"steps": [{"id": i, "op": op, "inputs": ins, "params": {}} for i, op, ins in steps]}


def test_a_failed_eval_names_the_tagged_graph_behind_its_compiled_candidate() -> None:
    from planner.core import diagnosis

    ir = _plan()
    ran = [{"id": s["id"], "op": s["op"], "status": "ok",
            "outputs": {"model": f"/store/{s['id']}/model.onnx"}} for s in ir["steps"]]
    assert diagnosis.failed_gate(ir, ran) is None  # the gate passed: nothing to diagnose
    ran[-1] |= {"status": "failed", "outputs": {}, "error": "eval: no tokenizer files"}
    assert diagnosis.failed_gate(ir, ran) is None  # failed, but on no verdict
    ran[-1]["metrics"] = {"regression": "accuracy dropped 0.05 > eval.max_drop 0.01"}
    assert diagnosis.failed_gate(ir, ran) == "eval"
    verify = {"id": "verify", "op": "verify", "status": "failed", "outputs": {}, "metrics": {},
              "error": "cosine_mean 0.9 is below verify.threshold 0.99 (...)"}
    with_verify = {"steps": [*ir["steps"], {**verify, "inputs": {}, "params": {}}]}
    assert diagnosis.failed_gate(with_verify, [*ran[:-1], verify]) == "verify"
    assert diagnosis.roles(ir, "eval") == ("normalize", "tag", "resolve")
    assert str(diagnosis.entry(ir, ran, "tag")) == "/store/tag"
    ran[4]["status"], ran[4]["outputs"] = "skipped", {}
    assert diagnosis.entry(ir, ran, "tag") is None


def test_the_target_runs_the_worst_innermost_modules() -> None:
    from executors.diagnosis.target_error import worst_leaves

    rows = [{"tag": "/M", "own_sqnr_db": 1.0}, {"tag": "/M/A", "own_sqnr_db": 9.0},
            {"tag": "/M/B", "own_sqnr_db": 5.0}, {"tag": "/M/C", "own_sqnr_db": None}]
    assert worst_leaves(rows, 2) == ["/M/B", "/M/A"]  # /M holds the others; C did not run


def test_ranked_table_shows_modules_below_their_shared_root() -> None:
    from planner.render.module_error import common_root, ranked, relative

    base = "/Net/Model/Encoder"
    rows = [{"tag": f"{base}/Block.{i}/Conv", "class": "Conv", "nodes": 3, "sqnr_db": 10.0 + i,
             "cosine": 0.9, "own_sqnr_db": 5.0 + i, "own_cosine": 0.9, "inherited": 5.0}
            for i in range(3)]
    assert common_root([r["tag"] for r in rows]) == base
    assert common_root(["/A/B", "/C/D"]) == ""
    assert relative(base, base) == "." and relative(f"{base}/X", base) == "X"
    lines = ranked(rows)
    assert lines[0].split()[:3] == ["module", "(under", f"{base})"]
    assert [ln.split()[0] for ln in lines[1:]] == ["Block.0/Conv", "Block.1/Conv", "Block.2/Conv"]
