"""Quantization layer by layer (executors/onnx/layerwise.py): a graph with a repeated block,
calibrated piece by piece on what the earlier pieces gave and quantized piece by piece, is the
QDQ graph the whole graph's quantization gives (the same nodes, the same weights and scales),
for the QNN and the CPU configurations and 4-bit blocks; where it could not be, the whole graph
is quantized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import layerwise
from executors.onnx import quantizer as Q

HIDDEN = 32


def _model(path: Path, layers: int = 3, foreign: bool = False, norms: bool = False,
           follower: bool = False, float_reader: bool = False) -> None:
    """An embedding, `layers` residual blocks and a head, as an exported decoder names them: a
    scale every block reads (one weight, several pieces), a constant that stands first and the
    last block reads, a block's sum that is also a graph output. `foreign`: block 0 ends
    in an ONNX Runtime op that shape inference cannot type."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name)

    inits = [weight("embed", 16, HIDDEN), weight("head", HIDDEN, 8), weight("scale", HIDDEN),
             weight("gamma", HIDDEN), weight("beta", HIDDEN)]
    nodes = [helper.make_node("MatMul", ["x", "embed"], ["h0"], name="/m/embed/MatMul"),
             helper.make_node("Constant", [], ["c"], name="/m/Constant",
                              value=numpy_helper.from_array(
                                  np.linspace(0.5, 1.5, HIDDEN).astype(np.float32)))]
    for k in range(layers):
        h, w = f"h{k}", f"w{k}"
        inits.append(weight(w, HIDDEN, HIDDEN))
        at = f"/m/layers.{k}"
        nodes += [helper.make_node("MatMul", [h, w], [f"a{k}"], name=f"{at}/mlp/MatMul"),
                  helper.make_node("Mul", [f"a{k}", "scale"], [f"s{k}"], name=f"{at}/Mul"),
                  helper.make_node("Add", [f"s{k}", h], [f"r{k}"], name=f"{at}/Add")]
        last = f"r{k}"
        if norms:
            nodes.append(helper.make_node("LayerNormalization", [last, "gamma", "beta"],
                                          [f"n{k}"], name=f"{at}/LayerNorm", axis=-1))
            last = f"n{k}"
            if k == 0:  # a weight named as a copy of the shared bias would be
                inits.append(weight("beta3", HIDDEN))
                nodes.append(helper.make_node("Add", [last, "beta3"], ["b0"], name=f"{at}/Bias"))
                last = "b0"
        if float_reader and k == 0:
            inits.append(weight("gain", HIDDEN))
            nodes.append(helper.make_node("Mul", [last, "gain"], [f"v{k}"], name=f"{at}/Gain"))
            last = f"v{k}"
        if k == layers - 1:
            nodes.append(helper.make_node("Mul", [last, "c"], [f"t{k}"], name=f"{at}/Mul_c"))
            last = f"t{k}"
            if float_reader:
                nodes += [helper.make_node("Shape", ["gain"], ["gs"], name=f"{at}/Shape"),
                          helper.make_node("Expand", [last, "gs"], [f"x{k}"],
                                           name=f"{at}/Expand")]
                last = f"x{k}"
            if follower:
                inits.append(numpy_helper.from_array(np.array([2, HIDDEN], np.int64), "shape"))
                nodes += [helper.make_node("Reshape", ["h0", "shape"], ["e"],
                                           name=f"{at}/Reshape"),
                          helper.make_node("Add", [last, "e"], [f"u{k}"], name=f"{at}/Add_e")]
                last = f"u{k}"
        if foreign and k == 0:
            nodes.append(helper.make_node("FastGelu", [last], [f"g{k}"], name=f"{at}/Gelu",
                                          domain="com.microsoft"))
            last = f"g{k}"
        nodes.append(helper.make_node("Identity", [last], [f"h{k + 1}"], name=f"{at}/Out"))
    nodes.append(helper.make_node("MatMul", [f"h{layers}", "head"], ["y"], name="/m/head/MatMul"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
               helper.make_tensor_value_info("r0", TensorProto.FLOAT, [2, HIDDEN])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 16])], outputs, inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))


def _params(profile: str, weights: str, activations: str, per_channel: bool,
            **more: Any) -> dict[str, Any]:
    return {"kind": "qdq", "weight_type": weights, "activation_type": activations,
            "per_channel": per_channel, "symmetric": False, "profile": profile,
            "calibration": {"method": "minmax", "samples": 3}, **more}


def _feeds() -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.normal(size=(2, 16)).astype(np.float32) * (i + 1)} for i in range(3)]


def _quantized(tmp: Path, p: dict[str, Any], mode: str) -> tuple[onnx.ModelProto, dict]:
    where = tmp / mode
    where.mkdir()
    staged = Q.stage(tmp / "float.onnx", where / ".float.onnx", p, _feeds(), None, pieces=mode)
    try:
        metrics = Q.quantize_to(staged, [], where / "model.onnx")
    finally:
        Q.unstage(staged)
    assert sorted(f.name for f in where.iterdir()) == ["model.onnx", "weights"][
        :1 + (where / "weights").is_dir()]  # nothing of the pieces left
    return onnx.load(str(where / "model.onnx"), load_external_data=False), metrics


def _same_graph(a: onnx.ModelProto, b: onnx.ModelProto) -> None:
    def nodes(m: onnx.ModelProto) -> list[bytes]:
        return sorted(n.SerializeToString(deterministic=True) for n in m.graph.node)

    def inits(m: onnx.ModelProto) -> dict[str, bytes]:
        return {i.name: i.SerializeToString(deterministic=True) for i in m.graph.initializer}

    assert nodes(a) == nodes(b)
    assert inits(a) == inits(b)  # the same values; a weight's location names its digest
    assert a.graph.input == b.graph.input and a.graph.output == b.graph.output
    assert {(o.domain, o.version) for o in a.opset_import} == \
        {(o.domain, o.version) for o in b.opset_import}


def _sorted(model: onnx.ModelProto) -> bool:
    known = {v.name for v in model.graph.input} | {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if any(x and x not in known for x in node.input):
            return False
        known.update(node.output)
    return True


@pytest.mark.parametrize(("profile", "weights", "activations", "per_channel", "more"), [
    ("qnn_htp", "uint8", "uint16", True, {}),
    ("cpu", "uint8", "uint8", False, {}),
    ("qnn_htp", "int4", "uint16", True, {"block_size": 16}),
])
@pytest.mark.parametrize("float_reader", [False, True])
def test_layer_by_layer_is_the_whole_graphs_quantization(
        tmp_path: Path, profile: str, weights: str, activations: str, per_channel: bool,
        more: dict[str, Any], float_reader: bool) -> None:
    _model(tmp_path / "float.onnx", float_reader=float_reader)
    p = _params(profile, weights, activations, per_channel, **more)
    whole, plain = _quantized(tmp_path, p, "never")
    pieces, metrics = _quantized(tmp_path, p, "always")
    assert "layerwise" not in plain
    assert metrics["layerwise"] == {"pieces": 2, "block": "/m/layers"}
    assert metrics["qdq_nodes"] == plain["qdq_nodes"] > 0
    _same_graph(whole, pieces)
    assert _sorted(pieces)
    onnx.checker.check_model(pieces)


def test_the_pieces_and_what_crosses_them(tmp_path: Path) -> None:
    _model(tmp_path / "m.onnx", layers=4)
    model = onnx.load(str(tmp_path / "m.onnx"))
    assert layerwise.cut(model, [""] * len(model.graph.node), "never") is None
    assert layerwise.cut(model, [""] * len(model.graph.node), "auto") is None  # 10 KB
    layers = layerwise.cut(model, [""] * len(model.graph.node), "always")
    assert layers is not None and layers.block == "/m/layers"
    first, second = layers.pieces
    names = [n.name for n in model.graph.node]
    assert names[first.nodes[0]] == "/m/embed/MatMul"
    assert names[second.nodes[-1]] == "/m/head/MatMul"
    # a constant goes with the piece that reads it, not with where it stands
    assert names.index("/m/Constant") in second.nodes
    # block 2's input crosses, and so does r0, a graph output
    assert set(first.outputs) == {"h2", "r0"} and second.inputs == ["h2"]
    assert "y" in second.outputs


def test_a_crossing_shape_inference_cannot_type_stays_as_the_whole_graph_has_it(
        tmp_path: Path) -> None:
    _model(tmp_path / "float.onnx", layers=2, foreign=True)
    p = _params("qnn_htp", "uint8", "uint16", True)
    whole, _ = _quantized(tmp_path, p, "never")
    pieces, metrics = _quantized(tmp_path, p, "always")
    assert metrics["layerwise"]["pieces"] == 2
    _same_graph(whole, pieces)
    # the whole graph's quantizer cannot tell h1 is float, so it reads it as it is
    assert any(n.op_type == "MatMul" and "h1" in n.input for n in pieces.graph.node)


def test_pieces_that_cannot_be_stitched_quantize_the_whole_graph(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> onnx.ModelProto:
        raise layerwise.Unstitched("'h1' changes quantized type where it crosses pieces")

    _model(tmp_path / "float.onnx")
    p = _params("qnn_htp", "uint8", "uint16", True)
    whole, _ = _quantized(tmp_path, p, "never")
    monkeypatch.setattr(layerwise, "stitch", refuse)
    pieces, metrics = _quantized(tmp_path, p, "always")
    assert metrics["layerwise"] == {"whole": "'h1' changes quantized type where it crosses "
                                             "pieces"}
    _same_graph(whole, pieces)


def test_a_bias_read_in_several_pieces_gets_the_whole_graphs_copies(tmp_path: Path) -> None:
    """ONNX Runtime gives each reader of a shared bias but the first its own copy, numbered
    after the largest number that follows the bias's name among the initializers ('beta3'
    here): a piece alone would number from its own initializers. The copies made before the
    cut bear the whole graph's names, and the stitched graph is the whole graph's."""
    _model(tmp_path / "float.onnx", norms=True)
    for profile, weights, activations, per_channel in (("qnn_htp", "uint8", "uint16", True),
                                                       ("cpu", "uint8", "uint8", False)):
        tmp = tmp_path / profile
        tmp.mkdir()
        (tmp / "float.onnx").write_bytes((tmp_path / "float.onnx").read_bytes())
        p = _params(profile, weights, activations, per_channel)
        whole, _ = _quantized(tmp, p, "never")
        pieces, metrics = _quantized(tmp, p, "always")
        assert metrics["layerwise"] == {"pieces": 2, "block": "/m/layers"}
        _same_graph(whole, pieces)
        biases = {n.input[2] for n in pieces.graph.node if n.op_type == "LayerNormalization"}
        assert biases == {"beta", "beta4", "beta5"}


def test_unshare_biases_names_copies_as_the_quantizer_does() -> None:
    """Only the readers the quantizer quantizes count: the first of them keeps the bias (here
    n1, as n0 stays float), the others get copies numbered after 'b12'; an Add reads it as an
    addend, not a bias. A bias with a tensor override is quantized once as a weight: no copy.
    A reader whose name another node has cannot be told apart, as the quantizer rewires by
    name."""
    def graph() -> onnx.GraphProto:
        ln = [helper.make_node("LayerNormalization", [f"x{k}", "g", "b"], [f"y{k}"],
                               name=f"n{k}") for k in range(3)]
        gemm = helper.make_node("Gemm", ["y2", "w", "b"], ["z"], name="gemm")
        other = helper.make_node("Add", ["z", "b"], ["out"], name="add")
        inits = [numpy_helper.from_array(np.zeros(4, np.float32), n)
                 for n in ("g", "b", "b12", "bx")]
        return helper.make_graph([*ln, gemm, other], "g", [], [], inits)

    g = graph()
    assert layerwise.unshare_biases(g, lambda n: n.name != "n0", set()) == 2
    assert [n.input[2] for n in g.node[:4]] == ["b", "b", "b13", "b14"]
    assert g.node[4].input[1] == "b"
    assert [i.name for i in g.initializer] == ["g", "b", "b12", "bx", "b13", "b14"]
    g = graph()
    assert layerwise.unshare_biases(g, lambda n: True, {"b"}) == 0
    g = graph()
    g.node[2].name = "n1"
    with pytest.raises(layerwise.Unstitched, match="'n1'"):
        layerwise.unshare_biases(g, lambda n: True, set())


def test_an_op_that_follows_its_inputs_quantization_in_a_later_piece_is_quantized_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Reshape of the embedding's output in the last block: the whole graph's quantizer knows
    that output is quantized when it reaches the Reshape and quantizes its output too; the last
    piece is told so (its inputs the earlier pieces quantized) and does the same. Untold, it
    reads its input as float and would not: the stitch finds it and the graph goes whole."""
    _model(tmp_path / "float.onnx", follower=True)
    p = _params("qnn_htp", "uint8", "uint16", True)
    whole, _ = _quantized(tmp_path, p, "never")
    pieces, metrics = _quantized(tmp_path, p, "always")
    assert metrics["layerwise"] == {"pieces": 2, "block": "/m/layers"}
    _same_graph(whole, pieces)
    assert any(n.op_type == "QuantizeLinear" and n.input[0] == "e" for n in pieces.graph.node)

    from contextlib import nullcontext

    monkeypatch.setattr(Q, "_marked", lambda _names: nullcontext())
    (tmp_path / "always").rename(tmp_path / "told")
    untold, metrics = _quantized(tmp_path, p, "always")
    assert metrics["layerwise"]["whole"].startswith("Reshape '/m/layers.2/Reshape' reads 'h0'")
    _same_graph(whole, untold)
