"""A graph input no node reads (the position ids of a causal LM that derives positions from its
attention mask) survives legalize's rewrites: the host feeds every graph of a role the same
inputs, and a session refuses a feed it has no input for."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_rewrites import REWRITES


def _erf_gelu_with_an_unread_input() -> onnx.ModelProto:
    """y = x * 0.5 * (1 + erf(x / sqrt 2)); position_ids is an input nothing reads."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"], name="/div"),
             helper.make_node("Erf", ["d"], ["e"], name="/erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="/add"),
             helper.make_node("Mul", ["x", "a"], ["m"], name="/mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="/half")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8]),
                     helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_rewrites_keep_an_unread_input() -> None:
    model = _erf_gelu_with_an_unread_input()
    done = {}
    for name, rewrite in REWRITES:
        result = rewrite(model)
        if isinstance(result, tuple):
            model, result = result
        done[name] = result
    assert done["erf_gelu"] == 1 and "Erf" not in {n.op_type for n in model.graph.node}
    assert [i.name for i in model.graph.input] == ["x", "position_ids"]
