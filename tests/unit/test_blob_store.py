"""Weights stored once: blobs named by their content, linked between entries through the store's
pool, verified with the entries that name them, and kept by gc while an entry names them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.artifacts import MODEL, load, problems, save
from executors.store import weights
from executors.store.content import Store
from executors.store.weights import THRESHOLD, WEIGHTS, blob_digest, pool_path

SIDE = 160  # 160 x 160 float32 = 100 KB: over the blob threshold


def _model(seed: int = 0) -> onnx.ModelProto:
    w = np.random.default_rng(seed).standard_normal((SIDE, SIDE)).astype(np.float32)
    b = np.ones(SIDE, np.float32)  # 640 bytes: stays in the graph
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SIDE])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _build(store: Store, key: str, model: onnx.ModelProto, base: Path | None = None) -> Path:
    with store.lock(key), store.building(key, {"step": key[:4], "op": "test"}) as tmp, \
            weights.blob_pool(store.pool):
        save(model, tmp / MODEL, base=base)
    return store.entry_dir(key)


def _blobs(entry: Path) -> list[Path]:
    return sorted((entry / WEIGHTS).iterdir())


def test_large_weights_become_blobs_named_by_content(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    entry = _build(store, "a" * 64, _model())
    (blob,) = _blobs(entry)
    assert blob_digest(f"{WEIGHTS}/{blob.name}") == store.get("a" * 64).files[f"{WEIGHTS}/{blob.name}"]
    assert blob.stat().st_size == SIDE * SIDE * 4
    assert os.path.samefile(blob, pool_path(store.pool, blob.name))  # in the pool, once
    graph = load(entry / MODEL, external=False)
    inline = {t.name for t in graph.graph.initializer if t.data_location != 1}
    assert inline == {"b"} and THRESHOLD > SIDE * 4
    x = np.ones((1, SIDE), np.float32)
    got = ort.InferenceSession(str(entry / MODEL), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = x @ numpy_helper.to_array(_model().graph.initializer[0]) + 1
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(numpy_helper.to_array(load(entry / MODEL).graph.initializer[0]),
                                  numpy_helper.to_array(_model().graph.initializer[0]))
    assert problems(entry / MODEL, tagged=False) == []


def test_a_graph_only_change_links_the_blob_it_had(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    first = _build(store, "a" * 64, _model())
    graph = load(first / MODEL, external=False)  # what tag and stamping do: no weights read
    graph.graph.node[0].name = "renamed"
    second = _build(store, "b" * 64, graph, base=first)
    (a,), (b,) = _blobs(first), _blobs(second)
    assert a.name == b.name and os.path.samefile(a, b)  # linked, not written again
    assert store.lookup("b" * 64)[0] is not None


def test_verify_finds_a_corrupt_blob_and_lookup_rebuilds(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    entry = _build(store, "a" * 64, _model())
    (blob,) = _blobs(entry)
    time.sleep(0.01)
    with blob.open("r+b") as fh:  # same size, other bytes: shared by the pool and the entry
        fh.write(b"\xff" * 16)
    found = store.verify(store.get("a" * 64))
    assert found == [f"{WEIGHTS}/{blob.name}: content does not match its digest"]
    assert store.verify_pool() == [pool_path(store.pool, blob.name)]
    got, repair = store.lookup("a" * 64)
    assert got is None and repair is not None
    assert not pool_path(store.pool, blob.name).exists()  # no rebuild may link it again
    rebuilt = _build(store, "a" * 64, _model())
    assert store.verify(store.get("a" * 64)) == [] and _blobs(rebuilt)[0].name == blob.name


def test_gc_keeps_blobs_an_entry_names_and_drops_the_rest(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    _build(store, "a" * 64, _model(0))
    _build(store, "b" * 64, _model(1))
    (kept,), (dropped,) = _blobs(store.entry_dir("a" * 64)), _blobs(store.entry_dir("b" * 64))
    assert store.drop_unreferenced_blobs() == (0, 0)
    store.remove("b" * 64)
    assert store.drop_unreferenced_blobs(dry_run=True) == (1, SIDE * SIDE * 4)
    assert pool_path(store.pool, dropped.name).exists()
    assert store.drop_unreferenced_blobs() == (1, SIDE * SIDE * 4)
    assert not pool_path(store.pool, dropped.name).exists()
    assert pool_path(store.pool, kept.name).exists()
    assert store.lookup("a" * 64)[0] is not None


@pytest.mark.parametrize("one_file", [True, False])  # torch writes a file per tensor over 2 GB
def test_external_data_a_tool_wrote_becomes_blobs(tmp_path: Path, one_file: bool) -> None:
    onnx.save_model(_model(), str(tmp_path / MODEL), save_as_external_data=True,
                    all_tensors_to_one_file=one_file, location=f"{MODEL}.data", size_threshold=0)
    model = load(tmp_path / MODEL, external=False)
    save(model, tmp_path / MODEL)
    assert sorted(p.name for p in tmp_path.iterdir()) == [MODEL, WEIGHTS]
    assert [p.stat().st_size for p in _blobs(tmp_path)] == [SIDE * SIDE * 4]
    assert {t.name for t in load(tmp_path / MODEL, external=False).graph.initializer
            if t.data_location != 1} == {"b"}  # the small one is back in the graph
