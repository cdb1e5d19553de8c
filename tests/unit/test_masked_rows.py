"""`x[ids == t] = v` as the exporters write it (NonZero + ScatterND) becomes one Where: exact on
the CPU for prompts with none, one and two selected rows (dynamo's form; TorchScript's is right
for one row only, and so is its rewrite's comparison), applied once, and only to that form."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_rewrites import REWRITES
from executors.onnx.masked_rows import masked_rows_as_wheres

H, TOKEN = 8, 5
V = np.random.default_rng(0).standard_normal(H).astype(np.float32)
TABLE = np.random.default_rng(1).standard_normal((16, H)).astype(np.float32)


def model(form: str) -> onnx.ModelProto:
    """emb = Gather(TABLE, ids); emb[ids == TOKEN] = V, in the `form` an exporter writes:
    "dynamo" (V repeated per selected row; the mask's new axis -1), "torchscript" (a prefix of
    V; the axis 2, the last of the mask's constant shape), or "slice_from_1" (a Slice that does
    not start at 0: not the assignment)."""
    def i64(name: str, *v: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(v, np.int64), name)

    inits = [numpy_helper.from_array(TABLE, "table"), numpy_helper.from_array(V, "v"),
             i64("token", TOKEN), i64("last", -1), i64("flat", -1), i64("h", H),
             i64("zero", 0), i64("one", 1), i64("two", 2), i64("target", 1, 6, H)]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="/embed/Gather"),
             helper.make_node("Equal", ["ids", "token"], ["rows"], name="/embed/Equal"),
             helper.make_node("Unsqueeze", ["rows", "last" if form == "dynamo" else "two"],
                              ["rows1"], name="/embed/Unsqueeze"),
             helper.make_node("Shape", ["emb"], ["shape"], name="/embed/Shape"),
             helper.make_node("Expand", ["rows1", "shape" if form == "dynamo" else "target"],
                              ["mask"], name="/embed/Expand"),
             helper.make_node("NonZero", ["mask"], ["nz"], name="/embed/NonZero"),
             helper.make_node("Transpose", ["nz"], ["idx"], name="/embed/Transpose", perm=[1, 0])]
    if form == "dynamo":
        nodes += [helper.make_node("Reshape", ["rows", "flat"], ["rows_flat"]),
                  helper.make_node("Cast", ["rows_flat"], ["rows_i"], to=TensorProto.INT64),
                  helper.make_node("ReduceSum", ["rows_i"], ["n"], keepdims=1),
                  helper.make_node("Concat", ["n", "h"], ["reps"], axis=0),
                  helper.make_node("Expand", ["v", "reps"], ["tiled"]),
                  helper.make_node("Reshape", ["tiled", "flat"], ["updates"])]
    else:
        start = "zero" if form == "torchscript" else "one"
        nodes += [helper.make_node("Shape", ["idx"], ["idx_shape"]),
                  helper.make_node("Gather", ["idx_shape", "zero"], ["end"], axis=0),
                  helper.make_node("Slice", ["v", start, "end"], ["updates"])]
    nodes.append(helper.make_node("ScatterND", ["emb", "idx", "updates"], ["out"],
                                  name="/embed/ScatterND"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "ids", TensorProto.INT64, [1, 6])], [helper.make_tensor_value_info(
            "out", TensorProto.FLOAT, [1, 6, H])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(m: onnx.ModelProto, ids: list[int]) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"ids": np.array([ids], np.int64)})[0]


PROMPTS = {"none": [1, 2, 3, 4, 6, 7], "one": [1, 5, 3, 4, 6, 7], "two": [5, 2, 3, 5, 6, 7]}


def test_the_masked_assignment_becomes_a_where_and_stays_exact():
    for form, prompts in (("dynamo", ("none", "one", "two")), ("torchscript", ("none", "one"))):
        m = model(form)
        want = {p: run(m, PROMPTS[p]) for p in prompts}
        assert masked_rows_as_wheres(m) == 1
        ops = [n.op_type for n in m.graph.node]
        assert "NonZero" not in ops and "ScatterND" not in ops and ops.count("Where") == 1
        onnx.checker.check_model(m, full_check=True)
        for p in prompts:
            np.testing.assert_array_equal(run(m, PROMPTS[p]), want[p])
        assert masked_rows_as_wheres(m) == 0
    # what the assignment means, where TorchScript's own graph fails (two rows, one V)
    m = model("torchscript")
    masked_rows_as_wheres(m)
    got = run(m, PROMPTS["two"])
    np.testing.assert_array_equal(got[0, [0, 3]], np.stack([V, V]))
    np.testing.assert_array_equal(got[0, [1, 2]], TABLE[[2, 3]])


def nodes(m: onnx.ModelProto) -> list[bytes]:
    return [n.SerializeToString() for n in m.graph.node]


def test_another_scatter_is_kept():
    """Not the assignment: a Slice that does not start at 0; a mask whose new axis is not its
    last (axis 1 of rows [1, 6]); a vector repeated along another axis (Reshape(v, [H, 1])
    expanded: each row one value); a vector of another width than x's rows."""
    variants = [model("slice_from_1")]
    m = model("dynamo")
    next(i for i in m.graph.initializer if i.name == "last").CopyFrom(
        numpy_helper.from_array(np.array([1], np.int64), "last"))
    variants.append(m)
    m = model("dynamo")
    tiled = next(n for n in m.graph.node if n.output[0] == "tiled")
    m.graph.initializer.append(numpy_helper.from_array(np.array([H, 1], np.int64), "column"))
    m.graph.node.insert(0, helper.make_node("Reshape", ["v", "column"], ["v_column"]))
    tiled.input[0] = "v_column"
    variants.append(m)
    m = model("torchscript")
    m.graph.initializer.append(numpy_helper.from_array(np.zeros(H + 1, np.float32), "v_wide"))
    next(n for n in m.graph.node if n.op_type == "Slice").input[0] = "v_wide"
    variants.append(m)
    for m in variants:
        before = nodes(m)
        assert masked_rows_as_wheres(m) == 0
        assert nodes(m) == before


def test_rows_of_another_rank_than_xs_less_one_are_kept():
    """Rows [1, 6] against x [1, 6, H, 1]: not rows of x (a mask of lower rank selects whole
    slices); the structure alone decides, before anything runs."""
    m = model("dynamo")
    emb = next(n for n in m.graph.node if n.output[0] == "emb")
    emb.output[0] = "emb3"
    m.graph.initializer.append(numpy_helper.from_array(np.array([1, 6, H, 1], np.int64), "r4"))
    m.graph.node.insert(1, helper.make_node("Reshape", ["emb3", "r4"], ["emb"]))
    before = nodes(m)
    assert masked_rows_as_wheres(m) == 0
    assert nodes(m) == before


def test_legalize_applies_it_before_the_wheres_become_arithmetic():
    names = [name for name, _ in REWRITES]
    assert names.index("masked_rows") < names.index("float_wheres")
