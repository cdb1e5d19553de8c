"""The quantizer calibrates before it loads the model, once per staged model and calibration
(executors/onnx/quantizer.py): the model it writes is the one ONNX Runtime's own `quantize`
writes when it calibrates inside, for the QNN and the CPU configurations, symmetric or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import quantizer as Q


def _model(path: Path) -> None:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(size=(16, 32)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(size=(32, 8)).astype(np.float32), "w2")
    b = numpy_helper.from_array(rng.normal(size=(32,)).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [w1, w2, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))


def _params(profile: str, symmetric: bool, method: str = "minmax") -> dict[str, Any]:
    return {"kind": "qdq", "weight_type": "uint8", "activation_type": "uint16",
            "per_channel": True, "symmetric": symmetric, "profile": profile,
            "calibration": {"method": method, "samples": 3}}


def _feeds() -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.normal(size=(2, 16)).astype(np.float32) * (i + 1)} for i in range(3)]


def _graph(path: Path) -> bytes:
    model = onnx.load(str(path), load_external_data=False)
    del model.metadata_props[:]
    return model.graph.SerializeToString(deterministic=True)


@pytest.mark.parametrize(("profile", "symmetric", "method"), [
    ("qnn_htp", False, "minmax"), ("qnn_htp", True, "minmax"), ("cpu", True, "minmax"),
    ("cpu", False, "percentile")])
def test_quantized_as_ort_quantizes_with_calibration_inside(
        tmp_path: Path, profile: str, symmetric: bool, method: str) -> None:
    from onnxruntime.quantization import CalibrationDataReader, quantize

    _model(tmp_path / "float.onnx")
    p = _params(profile, symmetric, method)
    staged = Q.stage(tmp_path / "float.onnx", tmp_path / "staged.onnx", p, _feeds(), None)
    ours = tmp_path / "ours.onnx"
    with Q.quiet_logging():
        Q.quantize_to(staged, [], ours)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(_feeds())

        def get_next(self) -> dict[str, Any] | None:
            return next(self.it, None)

    reference = tmp_path / "reference.onnx"
    with Q.quiet_logging():
        config = Q._config(p, staged.path, Reader(), {}, [], Q._qtypes())
        quantize(str(staged.path), str(reference), config)
    assert _graph(ours) == _graph(reference)
    caches = list(tmp_path.glob("staged.onnx.ranges-*.json"))
    assert len(caches) == 1
    Q.unstage(staged)
    assert not list(tmp_path.glob("staged.onnx*"))  # the ranges go with the staged model


def test_a_node_kept_in_float_changes_no_range(tmp_path: Path) -> None:
    """QNN's configuration names the op types of the nodes it quantizes: with the only Relu
    kept in float, Relu is not among them, and the ranges are still the ones calibrated for
    the whole graph (one calibration), the quantized graph still ORT's own."""
    from onnxruntime.quantization import quantize

    _model(tmp_path / "float.onnx")
    p = _params("qnn_htp", False)
    staged = Q.stage(tmp_path / "float.onnx", tmp_path / "staged.onnx", p, _feeds(), None)
    rules = [{"nodes": ["relu"], "precision": "float"}]
    with Q.quiet_logging():
        Q.quantize_to(staged, [], tmp_path / "all.onnx")
        Q.quantize_to(staged, rules, tmp_path / "ours.onnx")
        config = Q._config(p, staged.path, _Reader(_feeds()), {}, ["relu"], Q._qtypes())
        assert "Relu" not in config.op_types_to_quantize
        quantize(str(staged.path), str(tmp_path / "reference.onnx"), config)
    assert len(list(tmp_path.glob("staged.onnx.ranges-*.json"))) == 1
    assert _graph(tmp_path / "ours.onnx") == _graph(tmp_path / "reference.onnx")


def test_one_staged_model_is_calibrated_once(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxruntime.quantization import calibrate

    made = []
    real = calibrate.create_calibrator

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(calibrate, "create_calibrator", counted)
    _model(tmp_path / "float.onnx")
    p = _params("qnn_htp", False)
    staged = Q.stage(tmp_path / "float.onnx", tmp_path / "staged.onnx", p, _feeds(), None)
    with Q.quiet_logging():
        Q.quantize_to(staged, [], tmp_path / "a.onnx")
        Q.quantize_to(staged, [], tmp_path / "b.onnx")
    assert len(made) == 1  # the second quantization read the ranges of the first
    assert _graph(tmp_path / "a.onnx") == _graph(tmp_path / "b.onnx")


def test_the_calibration_options_of_the_config_are_the_calibrators(tmp_path: Path) -> None:
    from onnxruntime.quantization.calibrate import load_tensors_data

    _model(tmp_path / "float.onnx")
    p = _params("cpu", False)
    staged = Q.stage(tmp_path / "float.onnx", tmp_path / "staged.onnx", p, _feeds(), None)
    config = Q._config(p, staged.path, _Reader(_feeds()), {}, [], Q._qtypes())
    graph = onnx.load(str(staged.path), load_external_data=False).graph
    with Q.quiet_logging():
        plain = load_tensors_data(Q._calibrated(staged, config, graph))
        config.extra_options["CalibTensorRangeSymmetric"] = True
        config.calibration_data_reader = _Reader(_feeds())
        symmetric = load_tensors_data(Q._calibrated(staged, config, graph))
    assert set(plain.data) == set(symmetric.data) >= {"x", "h", "hb", "r", "y"}
    lows = {k: np.ravel(v.range_value[0])[0] for k, v in symmetric.data.items()}
    highs = {k: np.ravel(v.range_value[1])[0] for k, v in symmetric.data.items()}
    assert all(lows[k] == -highs[k] and highs[k] > 0 for k in lows)
    assert np.ravel(plain.data["r"].range_value[0])[0] == 0.0  # after Relu: not symmetric unless asked


class _Reader:
    def __init__(self, feeds: list[dict[str, Any]]) -> None:
        self.it = iter(feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self.it, None)


def test_the_torch_model_that_made_the_feeds_is_freed_before_the_quantizer_runs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A language model's calibration feeds come from the checkpoint run in PyTorch, whose
    modules refer to each other: unreachable once the feeds are made, it stays in memory, beside
    the quantizer's, until Python's next full collection, unless the feeds collect it."""
    import gc
    import weakref

    from executors.samples import Samples, generation

    alive: list[weakref.ref] = []

    class Module:  # a model: a cycle of modules, long-lived by the time its feeds are made
        def __init__(self) -> None:
            self.child = self

    def lm_feeds(wanted: dict[str, Any], specs: list[dict[str, Any]], n: int, *_: Any
                 ) -> generation.Got:
        model = Module()
        gc.collect()  # survived the collections of its loading: the oldest generation
        alive.append(weakref.ref(model))
        return generation.Got([{s["name"]: np.zeros(s["shape"], np.int64)
                                for s in wanted.values()} for _ in range(n)], "prompts")

    monkeypatch.setattr(generation, "lm_feeds", lm_feeds)
    specs = [{"name": "input_ids", "kind": "lm_prompt_ids", "dtype": "int64", "shape": [1, 4]}]
    feeds = Samples(specs, "calibration", source=tmp_path).feeds(2)
    assert [f["input_ids"].shape for f in feeds] == [(1, 4), (1, 4)]
    assert alive and alive[0]() is None
