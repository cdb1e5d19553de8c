"""Legalize checks that its rewrites left the graph's outputs where they were, on real tokens:
within 1e-4, or 1e-4 of the outputs' peak where that is over 1 (fused ops reorder float
arithmetic, and the same relative change moves a larger output further)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest
from onnx import TensorProto, helper

from executors.onnx.artifacts import MODEL
from executors.steps.legalize import TOLERANCE, _outputs_unchanged


class Failed(Exception):
    pass


def _constant_plus_x(path: Path, value: float) -> Path:
    """y = x * 0 + value: every output `value`, whatever is fed."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    level = helper.make_tensor("level", TensorProto.FLOAT, [], [value])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "zero"], ["none"]),
                               helper.make_node("Add", ["none", "level"], ["y"])],
                              "g", [x], [y], [zero, level])
    path.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(path / MODEL))
    return path / MODEL


def _check(tmp_path: Path, before: float, after: float) -> float:
    _constant_plus_x(tmp_path / "out", after)
    ctx = SimpleNamespace(out=tmp_path / "out", fail=lambda message, hint: Failed(message))
    return _outputs_unchanged(ctx, _constant_plus_x(tmp_path / "in", before))


@pytest.mark.parametrize("before, after, passes", [
    (4.0, 4.0 + 1.7e-4, True),   # 4e-5 of a peak of 4 (a tiny Moonshine encoder's change)
    (4.0, 4.0 + 5e-4, False),    # over 1e-4 of that peak
    (0.5, 0.5 + 0.9e-4, True),   # under 1e-4
    (0.5, 0.5 + 1.5e-4, False),  # a peak under 1 still allows 1e-4 at most
])
def test_an_output_may_move_by_a_ten_thousandth_of_its_peak(
        tmp_path: Path, before: float, after: float, passes: bool) -> None:
    if passes:
        assert _check(tmp_path, before, after) == pytest.approx(after - before, rel=1e-2)
        return
    with pytest.raises(Failed, match="legalization changed outputs") as failed:
        _check(tmp_path, before, after)
    assert f"{TOLERANCE} of the output's peak {before:.3g}" in str(failed.value)


def _two_levels(path: Path, big: float, small: float) -> Path:
    """Two outputs, every element `big` and `small`."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("y", "z")]
    inits = [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
             helper.make_tensor("big", TensorProto.FLOAT, [], [big]),
             helper.make_tensor("small", TensorProto.FLOAT, [], [small])]
    nodes = [helper.make_node("Mul", ["x", "zero"], ["none"]),
             helper.make_node("Add", ["none", "big"], ["y"]),
             helper.make_node("Add", ["none", "small"], ["z"])]
    path.mkdir(parents=True)
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], outs, inits),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path / MODEL))
    return path / MODEL


@pytest.mark.parametrize("small_after", [0.5 + 5e-3, float("nan")])
def test_each_output_is_judged_at_its_own_peak(tmp_path: Path, small_after: float) -> None:
    """A large output (logits, a mask's constants) does not widen what a small one may move,
    and a NaN is never within."""
    _two_levels(tmp_path / "out", 100.0, small_after)
    ctx = SimpleNamespace(out=tmp_path / "out", fail=lambda message, hint: Failed(message))
    with pytest.raises(Failed, match="output's peak 0.5"):
        _outputs_unchanged(ctx, _two_levels(tmp_path / "in", 100.0, 0.5))
