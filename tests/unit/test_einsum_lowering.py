"""Einsum lowered to Transpose/Reshape/MatMul/ReduceSum/Mul: numerically equal to numpy.einsum
over many random equations and shapes, with no Einsum left."""

from __future__ import annotations

import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from executors.onnx.einsum_lowering import Refused, lower_einsums, parse


def _einsum_model(equation: str, shapes: list[tuple[int, ...]]) -> onnx.ModelProto:
    names = [f"x{i}" for i in range(len(shapes))]
    want = np.einsum(equation, *[np.zeros(s, np.float32) for s in shapes]).shape
    graph = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], name="/encoder/layer.0/Einsum",
                          equation=equation)], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, want)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _random_equation(rng: random.Random) -> tuple[str, list[tuple[int, ...]]]:
    """An equation of 1-3 operands over a few letters (shared, contracted, summed in one
    operand, repeated in one operand, broadcast size-1 axes, an ellipsis), and its shapes."""
    letters = "abcdefg"[:rng.randint(2, 6)]
    size = {c: rng.randint(1, 4) for c in letters}
    ell = tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 2)))
    use_ell = rng.random() < 0.3
    terms, shapes = [], []
    for _ in range(rng.choice((1, 2, 2, 2, 3))):
        term = "".join(rng.sample(letters, rng.randint(1, min(4, len(letters)))))
        if rng.random() < 0.15:  # a diagonal: one letter twice
            term += rng.choice(term)
        shape = [size[c] if rng.random() > 0.1 else 1 for c in term]
        shape = [size[c] if term.count(c) > 1 else s for c, s in zip(term, shape)]
        if use_ell:
            own = ell[rng.randint(0, len(ell)):] if ell else ()
            own = tuple(1 if rng.random() < 0.2 else n for n in own)
            term, shape = "..." + term, [*own, *shape]
        terms.append(term)
        shapes.append(tuple(shape))
    used = sorted(set("".join(terms).replace(".", "")))
    if rng.random() < 0.25:
        return ",".join(terms), shapes  # numpy's implicit output
    out = "".join(rng.sample(used, rng.randint(0, len(used))))
    if use_ell and rng.random() < 0.8:
        out = "..." + out
    return ",".join(terms) + "->" + out, shapes


def test_random_equations_match_numpy():
    rng = random.Random(20261126)
    checked = 0
    for _ in range(400):
        equation, shapes = _random_equation(rng)
        feeds = {f"x{i}": np.random.default_rng(checked).standard_normal(s).astype(np.float32)
                 for i, s in enumerate(shapes)}
        try:
            want = np.einsum(equation, *feeds.values())
        except ValueError:
            continue  # not an equation numpy accepts (e.g. a diagonal in the output)
        model = _einsum_model(equation, shapes)
        assert lower_einsums(model) == 1, equation
        assert not any(n.op_type == "Einsum" for n in model.graph.node), equation
        onnx.checker.check_model(model, full_check=True)
        got = _run(model, feeds)
        assert got.shape == want.shape, equation
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=equation)
        checked += 1
    assert checked >= 250


@pytest.mark.parametrize("equation, shapes", [
    ("ibnd,jbnd->bnij", [(5, 1, 2, 4), (7, 1, 2, 4)]),     # XLNet content attention
    ("ijbs,ibns->bnij", [(5, 5, 1, 2), (5, 1, 2, 2)]),     # XLNet segment attention
    ("bnij,jbnd->ibnd", [(1, 2, 5, 5), (5, 1, 2, 4)]),     # XLNet attention-weighted values
    ("ibh,hnd->ibnd", [(5, 1, 8), (8, 2, 4)]),             # projections
    ("binh,dnh->bid", [(1, 5, 2, 4), (8, 2, 4)]),          # Funnel output projection
    ("ii->i", [(4, 4)]), ("ii", [(3, 3)]), ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
])
def test_model_equations_match_numpy(equation, shapes):
    feeds = {f"x{i}": np.random.default_rng(0).standard_normal(s).astype(np.float32)
             for i, s in enumerate(shapes)}
    model = _einsum_model(equation, shapes)
    assert lower_einsums(model) == 1
    ops = {n.op_type for n in model.graph.node}
    assert ops <= {"Transpose", "Reshape", "MatMul", "ReduceSum", "Mul", "Identity"}, ops
    np.testing.assert_allclose(_run(model, feeds), np.einsum(equation, *feeds.values()),
                               rtol=1e-5, atol=1e-5)


def test_dynamic_shapes_are_left_for_the_checker():
    model = _einsum_model("ij,jk->ik", [(2, 3), (3, 4)])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    assert lower_einsums(model) == 0
    assert [n.op_type for n in model.graph.node] == ["Einsum"]


def test_parse_spells_out_ellipsis_and_implicit_output():
    terms, out = parse("...ij,jk", [3, 2])
    assert terms[0][1:] == "ij" and terms[1] == "jk" and out == terms[0][0] + "ik"
    with pytest.raises(Refused, match="rank"):
        parse("ijk->i", [2])
    with pytest.raises(Refused, match="repeats a letter in its output"):
        parse("i->ii", [1])


def test_an_einsum_left_is_named_with_its_module_and_why():
    from executors.onnx.htp_rewrites import remedy, violations

    model = _einsum_model("ij,jk->ik", [(2, 3), (3, 4)])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    lower_einsums(model)
    assert violations(model) == [("Einsum node '/encoder/layer.0/Einsum' in /encoder/layer.0 "
                                 "(HTP has no Einsum)")]
    assert remedy(model) == ("legalize could not lower it: its input shapes are not static; "
                             "export with fixed shapes")
