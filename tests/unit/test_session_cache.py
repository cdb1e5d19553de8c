"""The layered ORT optimized-model cache: .onnx, then .ort with a hint, then disabled."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from executors.runtime import session_cache as sc


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [helper.make_node("Mul", ["x", "two"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], [two]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_onnx_cache_written_then_hit(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert sc.cpu_session(model, cache)[1].state == "wrote-onnx"
    assert sc.cpu_session(model, cache)[1].state == "hit-onnx"


def test_falls_back_to_ort_then_to_no_cache(model: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    real = sc._load_back
    broken: set[str] = {".onnx"}

    def flaky(path: Path):
        if path.suffix in broken:
            raise RuntimeError(f"injected: {path.suffix} does not load back")
        return real(path)

    monkeypatch.setattr(sc, "_load_back", flaky)
    session, info = sc.cpu_session(model, cache)
    assert info.state == "wrote-ort" and session is not None
    slot = next(cache.iterdir())
    assert (slot / sc.HINT_ORT).is_file() and (slot / "optimized.ort").is_file()
    assert sc.cpu_session(model, cache)[1].state == "hit-ort"  # converged in two runs

    broken.add(".ort")
    other = tmp_path / "cache2"
    assert sc.cpu_session(model, other)[1].state == "disabled"
    slot = next(other.iterdir())
    assert (slot / sc.DISABLED).is_file()
    assert sc.cpu_session(model, other)[1].state == "disabled"  # converged: no more tries
