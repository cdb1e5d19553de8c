"""An `If` whose condition the graph's constants decide is replaced by the branch it takes
(TorchScript's `squeeze(d)` on an axis of unknown size over a tensor the graph fixes: the dead
branch's Squeeze of a dimension of 2 fails onnx.checker); one on a graph input stays."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.static_ifs import fold_static_ifs


def _squeeze_if(first_from_input: bool) -> onnx.ModelProto:
    """y = squeeze(t, 0) if s[0] == 1 else t, with t = the constant [2, 3] ones plus x and s the
    shape of the ones (or, `first_from_input`, of the input x, whose first axis is free)."""
    branch_out = helper.make_tensor_value_info("picked", TensorProto.FLOAT, None)
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["axis"], value=numpy_helper.from_array(
            np.array([0], np.int64))),
         helper.make_node("Squeeze", ["t", "axis"], ["picked"])], "then", [], [branch_out])
    other = helper.make_graph([helper.make_node("Identity", ["t"], ["picked"])], "else", [],
                              [branch_out])
    shaped = "x" if first_from_input else "ones"
    nodes = [helper.make_node("Add", ["ones", "x"], ["t"]),
             helper.make_node("Shape", [shaped], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["first"], axis=0),
             helper.make_node("Equal", ["first", "one"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other,
                              name="squeeze_if")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, ["rows" if first_from_input else 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.ones((2, 3), np.float32), "ones"),
         numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.array(1, np.int64), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_an_if_of_a_constant_condition_becomes_its_taken_branch() -> None:
    """ONNX Runtime cannot load the If as it is (the dead Squeeze fails its type inference, as
    LongCat-Flash's experts did); the folded graph runs and gives the Identity's x + 1."""
    model = _squeeze_if(first_from_input=False)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert fold_static_ifs(model) == 1
    assert "If" not in {n.op_type for n in model.graph.node}
    assert [n.name for n in model.graph.node if n.name.startswith("squeeze_if/")] == [
        "squeeze_if/picked"]  # the else branch's Identity: dimension 0 is 2
    onnx.checker.check_model(model, full_check=True)
    np.testing.assert_array_equal(_run(model, x), x + 1)


def test_an_if_on_a_free_axis_stays_and_one_on_a_fixed_axis_of_an_input_folds() -> None:
    fixed = _squeeze_if(first_from_input=False)
    fixed.graph.node[1].input[0] = "x"  # Shape(x): x is [2, 3], whatever its values
    assert fold_static_ifs(fixed) == 1
    model = _squeeze_if(first_from_input=True)
    assert fold_static_ifs(model) == 0
    assert "If" in {n.op_type for n in model.graph.node}
