"""EPContext models sharing one QNN context binary (executors/runtime/shared_context.py) on the
real QNN EP (HTP simulator): the shared binary holds the weights once; where this host cannot
load it the build falls back to one binary per graph and says why; both graphs run and match
the CPU EP."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from executors.runtime import shared_context as sc
from planner.core.targets import named
from tests.qdq_pairs import write_pair

HTP = named("qnn_htp")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn missing")]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_shared_group_writes_one_binary_holding_the_weights_once(tmp_path: Path) -> None:
    sources = write_pair(tmp_path / "src", hidden=128, inner=512)  # 128 KiB of weights
    shared = sc.compile_group(HTP, sources, tmp_path / "shared", share=True)
    separate = sc.compile_group(HTP, sources, tmp_path / "separate", share=False)
    one = sc.binaries_of(shared)
    assert len(one) == 1 and one[0].name == "prefill_ctx_qnn.bin"
    two = sc.binaries_of(separate)
    assert len(two) == 2
    single = two[0].stat().st_size
    assert one[0].stat().st_size < 1.5 * single < sum(p.stat().st_size for p in two)


def test_build_runs_both_graphs_and_matches_cpu(tmp_path: Path) -> None:
    import onnxruntime as ort

    sources = write_pair(tmp_path / "src")
    cs = sc.build_context_set(HTP, sources, tmp_path / "out")
    assert len(cs.binaries) == (1 if cs.shared else 2)
    if not cs.shared:  # the x86 HTP simulator: the shared binary is kept for the device
        assert "does not load on this host" in cs.reason and "crashed with SIG" in cs.reason
        assert cs.device_set and len(sc.binaries_of(cs.device_set)) == 1
    sessions = sc.open_sessions(HTP, cs)
    rng = np.random.default_rng(1)
    for source, sess in zip(sources, sessions, strict=True):
        shape = sess.get_inputs()[0].shape
        x = rng.uniform(-1, 1, size=shape).astype(np.float32)
        cpu = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
        assert _cosine(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0]) > 0.99
    while sessions:  # reverse order: the first session owns the shared context
        sessions.pop()


def test_a_failed_compile_is_an_error_naming_the_model(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["y"])], "nz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1, None])])
    path = tmp_path / "nz.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(sc.ContextError, match=r"compile of nz.onnx (failed|crashed)"):
        sc.compile_group(HTP, [path], tmp_path / "out", share=True)
