"""Weights read when used, not all at once: graph rewrites see constants as a lazy mapping (an
array is made only for a name that is read), and the quantizer's staged copy gathers the
store's blobs into one data file in chunks, never through memory."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import graph_edit
from executors.onnx.artifacts import load, save
from executors.store import weights


def model_with(weights_by_name: dict[str, np.ndarray]) -> onnx.ModelProto:
    names = list(weights_by_name)
    nodes = [helper.make_node("MatMul", ["x", names[0]], ["h0"])]
    for i, name in enumerate(names[1:], 1):
        nodes.append(helper.make_node("MatMul", [f"h{i - 1}", name], [f"h{i}"]))
    nodes.append(helper.make_node("Constant", [], ["floor"],
                                  value=numpy_helper.from_array(np.float32(-1e4), "floor")))
    nodes.append(helper.make_node("Add", [f"h{len(names) - 1}", "floor"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(a, n) for n, a in weights_by_name.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constants_are_made_arrays_only_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    model = model_with({"w0": rng.standard_normal((64, 64), np.float32),
                        "w1": rng.standard_normal((64, 64), np.float32)})
    made: list[str] = []
    real = numpy_helper.to_array
    monkeypatch.setattr(graph_edit.numpy_helper, "to_array",
                        lambda t, *a: made.append(t.name) or real(t, *a))
    consts = graph_edit.constants(model)
    assert sorted(consts) == ["floor", "w0", "w1"] and len(consts) == 3 and made == []
    assert "w1" in consts and made == []
    np.testing.assert_array_equal(consts["w1"], real(model.graph.initializer[1]))
    assert consts.get("floor") == np.float32(-1e4) and consts.get("absent") is None
    consts["w1"]
    assert made == ["w1", "floor"]  # each read once, then kept
    scanned = dict(consts.items())
    assert sorted(scanned) == ["floor", "w0", "w1"] and made == ["w1", "floor", "w0"]


def test_the_staged_copy_gathers_hard_linked_blobs_into_one_aligned_file(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    arrays = {"w0": rng.standard_normal((300, 64), np.float32),
              "w1": rng.standard_normal((64, 600), np.float32).astype(np.float16),
              "tiny": rng.standard_normal((4, 64), np.float32)}
    first = tmp_path / "entry"
    first.mkdir()
    save(model_with(arrays), first / "model.onnx")
    # a second entry whose blobs are hard links to the first's, as the store makes them
    second = tmp_path / "linked"
    (second / "weights").mkdir(parents=True)
    for blob in (first / "weights").iterdir():
        os.link(blob, second / "weights" / blob.name)
    (second / "model.onnx").write_bytes((first / "model.onnx").read_bytes())
    assert any(b.stat().st_nlink > 1 for b in (second / "weights").iterdir())

    model = load(second / "model.onnx", external=False)
    out = tmp_path / "staged"
    out.mkdir()
    weights.gather(model, second, out / "model.onnx.data")
    onnx.save_model(model, str(out / "model.onnx"))
    big = [t for t in model.graph.initializer if t.data_location == weights.EXTERNAL]
    assert sorted(t.name for t in big) == ["w0", "w1"]  # the small one stays in the graph
    offsets = [int(next(e.value for e in t.external_data if e.key == "offset")) for t in big]
    assert all(o % 4096 == 0 for o in offsets) and len(set(offsets)) == 2
    back = onnx.load(str(out / "model.onnx"))  # onnx's own loader: a single, unlinked file
    got = {t.name: numpy_helper.to_array(t) for t in back.graph.initializer}
    for name, want in arrays.items():
        np.testing.assert_array_equal(got[name], want)


def test_a_short_blob_is_an_error_not_a_short_tensor(tmp_path: Path) -> None:
    entry = tmp_path / "entry"
    entry.mkdir()
    save(model_with({"w0": np.ones((256, 64), np.float32)}), entry / "model.onnx")
    blob = next((entry / "weights").iterdir())
    blob.write_bytes(blob.read_bytes()[:1000])
    with pytest.raises(OSError, match="shorter than tensor 'w0'"):
        weights.gather(load(entry / "model.onnx", external=False), entry,
                       tmp_path / "model.onnx.data")
