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


def _external(tmp_path: Path) -> Path:
    """A graph whose 4 MB weight lives in a file beside it."""
    import numpy as np
    from onnx import numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])
    w = numpy_helper.from_array(np.eye(1024, dtype=np.float32), "w")
    model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])],
                                                "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext" / "m.onnx"
    path.parent.mkdir()
    onnx.save(model, str(path), save_as_external_data=True, location="m.data")
    return path


def test_weights_are_counted_with_their_external_data(tmp_path: Path) -> None:
    path = _external(tmp_path)
    assert sc.weight_bytes(path) == path.stat().st_size + 1024 * 1024 * 4


def test_a_model_over_the_limit_is_not_copied_into_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, cache = _external(tmp_path), tmp_path / "cache"
    monkeypatch.setattr(sc, "MAX_CACHED_BYTES", 2**20)
    session, info = sc.cpu_session(path, cache)
    assert info.state == "off" and "GiB" in info.detail
    assert session.run(None, {"x": __import__("numpy").ones((1, 1024), "float32")})[0].sum() == 1024
    assert not cache.exists()  # nothing written: not even an empty slot


def test_a_cached_graph_keeps_its_weights_under_a_lasting_name(tmp_path: Path) -> None:
    path, cache = _external(tmp_path), tmp_path / "cache"
    assert sc.cpu_session(path, cache)[1].state == "wrote-onnx"
    slot = next(cache.iterdir())
    assert not [p for p in slot.iterdir() if p.name.startswith(".writing")]
    assert sc.cpu_session(path, cache)[1].state == "hit-onnx"
