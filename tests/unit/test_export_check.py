"""Export's own check against torch judges each output at the scale of its own values: a graph
whose outputs are of 1e-5 and wrong by half of that fails, as one whose outputs are of 1 would
(a tolerance of 1e-4 of at least 1 passed any answer below 1e-4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from executors.run.step_api import StepContext
from executors.steps.export import _check_against_torch, differences
from planner.errors import StepError

SCALE = 1e-5  # outputs far below 1e-4: the size of a random-init model's tiny logits


def _scaled_and_doubled(path: Path) -> Path:
    """small = x * SCALE, big = x * 2: one output far below 1, one of the input's size."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["small"]),
         helper.make_node("Mul", ["x", "two"], ["big"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in ("small", "big")],
        initializer=[numpy_helper.from_array(np.array(SCALE, np.float32), "scale"),
                     numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _ctx(tmp_path: Path) -> StepContext:
    step = {"id": "export", "op": "export", "params": {}, "inputs": {}, "key": "f" * 64,
            "action": "run"}
    return StepContext(step, {}, tmp_path, progress=lambda _m: None)


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)


def test_a_right_answer_of_tiny_scale_passes(tmp_path: Path, x: np.ndarray) -> None:
    path = _scaled_and_doubled(tmp_path / "model.onnx")
    want = (torch.from_numpy(x * np.float32(SCALE)), torch.from_numpy(x * 2))
    assert _check_against_torch(_ctx(tmp_path), path, {"x": x}, want)[0] <= 1e-6


def test_a_wrong_answer_of_tiny_scale_fails(tmp_path: Path, x: np.ndarray) -> None:
    path = _scaled_and_doubled(tmp_path / "model.onnx")
    # torch says 1.5x what the graph computes: off by ~1e-5, under the old 1e-4 floor
    want = (torch.from_numpy(x * np.float32(1.5 * SCALE)), torch.from_numpy(x * 2))
    with pytest.raises(StepError, match=r"ONNX Runtime's small differs from torch by .*"
                                        r"tolerance .*0.0001 of its peak"):
        _check_against_torch(_ctx(tmp_path), path, {"x": x}, want)


def test_a_big_output_does_not_lend_its_scale_to_a_small_one(tmp_path: Path,
                                                            x: np.ndarray) -> None:
    path = _scaled_and_doubled(tmp_path / "model.onnx")
    # the big output is right and peaks near 5; the small one is wrong by its own size
    want = (torch.from_numpy(-x * np.float32(SCALE)), torch.from_numpy(x * 2))
    with pytest.raises(StepError, match="small differs"):
        _check_against_torch(_ctx(tmp_path), path, {"x": x}, want)


def test_an_all_zero_reference_is_met_only_by_zeros() -> None:
    zero = np.zeros((2, 3), np.float32)
    assert differences([zero], [zero])[0].within
    assert not differences([zero + 1e-20], [zero])[0].within
    assert not differences([np.full((2, 3), np.nan, np.float32)], [zero])[0].within


def test_the_tolerance_is_relative_to_each_peak() -> None:
    ref = np.array([1e-30, -4e-30], np.float32)
    close, far = ref * np.float32(1 + 1e-6), ref * np.float32(1.01)
    found = differences([close, far], [ref, ref])
    assert found[0].within and not found[1].within
    assert found[1].peak == pytest.approx(4e-30, rel=1e-6)
    assert found[1].max_abs == pytest.approx(4e-32, rel=1e-3)


def _summed_over_tokens(path: Path, unrolled: bool) -> Path:
    """out[b, t] = x[b, t] + x[b, 0]: over free [batch, sequence] axes, as a trace that keeps
    the sequence free writes it (a Gather of token 0), or as one that unrolled its loop over
    the 6 traced tokens writes it (a constant of the trace's length: a Slice of 6 tokens)."""
    first = helper.make_node("Gather", ["x", "zero"], ["first"], axis=1)
    if unrolled:  # the traced length, as a constant: another length gives another shape
        nodes = [first, helper.make_node("Unsqueeze", ["first", "one"], ["col"]),
                 helper.make_node("Expand", ["col", "traced"], ["wide"]),
                 helper.make_node("Add", ["x", "wide"], ["out"])]
    else:
        nodes = [first, helper.make_node("Unsqueeze", ["first", "one"], ["col"]),
                 helper.make_node("Add", ["x", "col"], ["out"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "sequence"])],
        initializer=[numpy_helper.from_array(np.array(0, np.int64), "zero"),
                     numpy_helper.from_array(np.array([1], np.int64), "one"),
                     numpy_helper.from_array(np.array([1, 6], np.int64), "traced")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("unrolled", [False, True])
def test_free_axes_are_checked_at_a_shorter_length_and_fixed_where_they_do_not_hold(
        tmp_path: Path, unrolled: bool) -> None:
    """A graph exported with a free sequence is run at a second, shorter length too: where it
    fails there (RWKV's trace unrolls its loop over the tokens), its axes are declared at the
    traced length, which is where it holds."""
    from executors.onnx.free_axes import fix_axes, shorter

    path = _summed_over_tokens(tmp_path / "model.onnx", unrolled)
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(1, 6)).astype(np.float32))
    axes = {"x": {0: "batch", 1: "sequence"}, "out": {0: "batch", 1: "sequence"}}
    cut = shorter((x,), ["x"], axes)
    assert cut is not None and cut[0].shape == (1, 4)
    second = ({"x": cut[0].numpy()}, cut[0] + cut[0][:, :1])
    err, holds = _check_against_torch(_ctx(tmp_path), path, {"x": x.numpy()}, x + x[:, :1],
                                      second=second)
    assert err <= 1e-6 and holds is not unrolled
    if unrolled:
        assert fix_axes(path, (x,), ["x"], x + x[:, :1]).endswith("fixed at 6 tokens")
        model = onnx.load(str(path))
        for value in (*model.graph.input, *model.graph.output):
            assert [d.dim_value for d in value.type.tensor_type.shape.dim] == [1, 6]
    assert shorter((x,), ["x"], None) is None
    assert shorter((x,), ["past_key_values.0.key"], axes) is None  # a free past's: not cut
