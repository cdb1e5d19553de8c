"""Cutting one module's subgraph out of a tagged graph: its boundary tensors become inputs and
outputs typed from the graph, weights and the Q/DQ in front of an input come along, constants
are not outputs, and the piece passes onnx.checker and runs alone with the same values."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import subgraph as sg
from executors.onnx.artifacts import TAG_KEY

F = TensorProto.FLOAT


def tagged(name: str, op: str, ins: list[str], outs: list[str], tag: str,
           **attrs: object) -> onnx.NodeProto:
    node = helper.make_node(op, ins, outs, name=name, **attrs)
    node.metadata_props.add(key=TAG_KEY, value=tag)
    return node


def three_modules() -> onnx.ModelProto:
    """x -> /M/A (Relu) -> /M/B (MatMul by W, then Add of a constant) -> /M/C (Sigmoid) -> y,
    with /M/B's result also a graph output."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32) * 2, "W")
    nodes = [tagged("a", "Relu", ["x"], ["a_out"], "/M/A"),
             tagged("b_const", "Constant", [], ["one"], "/M/B",
                    value=numpy_helper.from_array(np.ones((1, 4), np.float32))),
             tagged("b_mm", "MatMul", ["a_out", "W"], ["b_mm_out"], "/M/B/Linear"),
             tagged("b_add", "Add", ["b_mm_out", "one"], ["b_out"], "/M/B"),
             tagged("c", "Sigmoid", ["b_out"], ["y"], "/M/C")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 4])],
                              [helper.make_tensor_value_info("y", F, [1, 4]),
                               helper.make_tensor_value_info("b_out", F, [1, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def piece_of(model: onnx.ModelProto, path: str) -> tuple[sg.Cut, onnx.ModelProto]:
    tags = sg.node_tags(model.graph)
    c = sg.cut(model.graph, path, sg.members(tags, path))
    return c, sg.build(model, c, sg.value_infos(model))


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray], outputs: list[str] | None = None):
    """Run on CPU; `outputs` may name intermediate tensors."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    have = {o.name for o in model.graph.output}
    for name in outputs or []:
        if name not in have:
            model.graph.output.add(name=name)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(outputs, feed)


def test_boundary_tensors_become_typed_inputs_and_outputs() -> None:
    model = three_modules()
    c, piece = piece_of(model, "/M/B")
    assert c.inputs == ["a_out"] and c.outputs == ["b_out"]
    assert [n.name for n in piece.graph.node] == ["b_const", "b_mm", "b_add"]
    assert [i.name for i in piece.graph.initializer] == ["W"]  # weights stay weights
    (inp,) = piece.graph.input
    assert inp.type.tensor_type.elem_type == F
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim] == [1, 4]
    onnx.checker.check_model(piece, full_check=True)
    assert {p.key: p.value for p in piece.metadata_props}[sg.PIECE_KEY] == "/M/B"
    x = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)
    a_out, want = run(model, {"x": x}, ["a_out", "b_out"])
    np.testing.assert_allclose(run(piece, {"a_out": a_out})[0], want)


def test_graph_inputs_and_outputs_stay_boundaries() -> None:
    model = three_modules()
    c, _ = piece_of(model, "/M/A")
    assert c.inputs == ["x"] and c.outputs == ["a_out"]
    c, _ = piece_of(model, "/M/C")
    assert c.inputs == ["b_out"] and c.outputs == ["y"]
    c, _ = piece_of(model, "/M")
    assert c.inputs == ["x"] and c.outputs == ["b_out", "y"]


def test_submodules_belong_to_their_module() -> None:
    tags = sg.node_tags(three_modules().graph)
    assert sg.members(tags, "/M/B") == [1, 2, 3]
    assert sg.members(tags, "/M/B/Linear") == [2]
    assert sg.members(tags, "/M/Nothing") == []


def test_a_class_name_matches_every_module_of_that_class_outermost_first() -> None:
    paths = ["/Net", "/Net/Enc", "/Net/Enc/Block.0", "/Net/Enc/Block.0/Attn",
             "/Net/Enc/Block.1", "/Net/Enc/Block.1/Attn", "/Net/Enc/Block.1/Attn/Block"]
    assert sg.matches("Block", paths) == ["/Net/Enc/Block.0", "/Net/Enc/Block.1"]
    assert sg.matches("Attn", paths) == ["/Net/Enc/Block.0/Attn", "/Net/Enc/Block.1/Attn"]
    assert sg.matches("/Net/Enc/Block.1", paths) == ["/Net/Enc/Block.1"]
    assert sg.matches("Missing", paths) == [] and sg.matches("/Net/Missing", paths) == []


def qdq_model() -> onnx.ModelProto:
    """/M/A: Relu -> Q -> DQ (activation Q/DQ tagged with its producer); /M/B: MatMul of that
    by a DQ'd uint8 weight; the activation DQ is also read by /M/C."""
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "zp"),
             numpy_helper.from_array(np.full((4, 4), 140, np.uint8), "Wq")]
    nodes = [tagged("a", "Relu", ["x"], ["a_out"], "/M/A"),
             tagged("a_q", "QuantizeLinear", ["a_out", "s", "zp"], ["a_q_out"], "/M/A"),
             tagged("a_dq", "DequantizeLinear", ["a_q_out", "s", "zp"], ["a_dq_out"], "/M/A"),
             tagged("w_dq", "DequantizeLinear", ["Wq", "s", "zp"], ["W"], "/M/B"),
             tagged("b", "MatMul", ["a_dq_out", "W"], ["b_out"], "/M/B"),
             tagged("c", "Add", ["b_out", "a_dq_out"], ["y"], "/M/C")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 4])],
                              [helper.make_tensor_value_info("y", F, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_quantized_piece_takes_the_float_tensor_and_quantizes_it_itself() -> None:
    model = qdq_model()
    c, piece = piece_of(model, "/M/B")
    assert c.inputs == ["a_out"] and c.outputs == ["b_out"]
    assert [n.name for n in piece.graph.node] == ["a_q", "a_dq", "w_dq", "b"]
    assert c.module_nodes == 2 and len(c.keep) == 4
    onnx.checker.check_model(piece, full_check=True)
    x = np.array([[0.3, -0.2, 1.0, 0.7]], np.float32)
    a_out, want = run(model, {"x": x}, ["a_out", "b_out"])
    np.testing.assert_allclose(run(piece, {"a_out": a_out})[0], want)


def test_a_constant_another_module_reads_is_not_an_output() -> None:
    model = qdq_model()
    # /M/B's weight DQ is also read by a node of /M/C: still a weight, not an output
    model.graph.node[5].input[1] = "W"
    model.graph.node[5].input[0] = "b_out"
    c, _ = piece_of(model, "/M/B")
    assert c.outputs == ["b_out"]
    c, piece = piece_of(model, "/M/C")
    assert c.inputs == ["b_out"] and "w_dq" in [n.name for n in piece.graph.node]


def test_initializers_named_like_runtime_generated_tensors_are_renamed() -> None:
    model = three_modules()
    model.graph.initializer[0].name = "gemm_input_shape_token_0"
    model.graph.node[2].input[1] = "gemm_input_shape_token_0"
    _, piece = piece_of(model, "/M/B")
    assert [i.name for i in piece.graph.initializer] == ["gemm_input_shape_token_0_kept"]
    assert piece.graph.node[1].input[1] == "gemm_input_shape_token_0_kept"
    onnx.checker.check_model(piece, full_check=True)


def test_a_value_an_earlier_block_reads_goes_with_the_earlier_part() -> None:
    """The exporter may make a value two layers share under the later layer's name (deepseek_v2's
    rotary Unsqueeze, named in layers.1 and read by layers.0 too): that node, and what it
    reads, go with the first part that reads it, so that no part reads what a later part
    makes; the blocks' own nodes stay where their names put them."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="/m/layers.1/attn/Shape"),
             helper.make_node("Cast", ["s"], ["c"], name="/m/layers.1/attn/Cast", to=F),
             helper.make_node("Unsqueeze", ["c", "ax"], ["u"], name="/m/layers.1/attn/Unsqueeze"),
             helper.make_node("Mul", ["x", "u"], ["h1"], name="/m/layers.0/attn/Mul"),
             helper.make_node("Mul", ["h1", "u"], ["h2"], name="/m/layers.1/attn/Mul"),
             helper.make_node("Relu", ["h2"], ["h3"], name="/m/layers.2/Relu"),
             helper.make_node("Relu", ["h3"], ["y"], name="/m/layers.3/Relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])],
                              [numpy_helper.from_array(np.array([0], np.int64), "ax")])
    prefix, index = sg.blocks([n.name for n in graph.node])
    assert prefix == "/m/layers" and index == [1, 1, 1, 0, 1, 2, 3]
    assert sg.assign(graph, index, 2) == [0, 0, 0, 0, 0, 1, 1]
    assert sg.assign(graph, index, 4) == [0, 0, 0, 0, 1, 2, 3]
