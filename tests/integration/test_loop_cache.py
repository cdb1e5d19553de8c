"""The ORT optimized-model cache on a real torch-exported ONNX `Loop`: a tiny random BART's
greedy decode loop (the traced decoder and an argmax in the body of one `Loop`), exported by
the TorchScript exporter, with the traced encoder before the loop or without it.

With the encoder in the graph, ORT 1.32 writes an optimized `.onnx` it cannot load back (its
MatMul+Add -> Gemm fusion names a reshape output the same in the outer graph and in the loop
body, which breaks SSA), so the cache must serve that model from its `.ort` tier; the loop
alone round-trips as `.onnx`. The tests ask ORT whether its `.onnx` loads back and check that
the cache takes the tier that answer calls for, on any ORT; either way the cached session
generates PyTorch's tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from benchmarks import loop_cache_bench as bench
from executors.runtime import session_cache as sc


@pytest.fixture(scope="module")
def model() -> Any:
    return bench.tiny_bart()


@pytest.fixture(scope="module")
def ids() -> np.ndarray:
    return np.random.default_rng(0).integers(4, bench.CONFIG["vocab_size"], (1, bench.SOURCE),
                                             np.int64)


@pytest.fixture(scope="module", params=[True, False], ids=["encoder+loop", "loop"])
def graph(request: pytest.FixtureRequest, model: Any,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bool]:
    work = tmp_path_factory.mktemp("loop")
    return bench.export_loop(model, work / "greedy.onnx", request.param), request.param


def source(model: Any, ids: np.ndarray, with_encoder: bool) -> np.ndarray:
    return ids if with_encoder else bench.encoder_states(model, ids)


def unquoted(text: str) -> str:
    return text.replace("\\", "").replace("'", "")


def test_the_greedy_loop_is_one_onnx_loop(graph: tuple[Path, bool]) -> None:
    path, with_encoder = graph
    proto = onnx.load(str(path))
    loops = [n for n in proto.graph.node if n.op_type == "Loop"]
    assert len(loops) == 1
    body = loops[0].attribute[0].g
    body_ops = {n.op_type for n in body.node}
    assert {"MatMul", "Softmax", "ArgMax"} <= body_ops  # the decoder and the argmax, per step
    outer_matmuls = sum(n.op_type == "MatMul" for n in proto.graph.node)
    assert (outer_matmuls > 0) == with_encoder  # the encoder runs once, before the loop


def test_the_loop_generates_pytorchs_tokens(graph: tuple[Path, bool], model: Any,
                                            ids: np.ndarray) -> None:
    path, with_encoder = graph
    expected = bench.torch_greedy(model, ids)
    got = bench.generate(bench.plain_session(path), source(model, ids, with_encoder))
    np.testing.assert_array_equal(got, expected)
    assert len(set(expected[0, 1:].tolist())) > 1  # the tokens depend on the step


def test_the_cache_holds_the_loop_on_the_tier_ort_can_reload(
        graph: tuple[Path, bool], model: Any, ids: np.ndarray, tmp_path: Path) -> None:
    path, with_encoder = graph
    back = bench.ort_self_reload(path, tmp_path)
    assert back["reloads"] or with_encoder, back["error"]  # the loop alone always round-trips
    fmt = "onnx" if back["reloads"] else "ort"
    cache, feed = tmp_path / "cache", source(model, ids, with_encoder)
    expected = bench.torch_greedy(model, ids)
    first, info = sc.cpu_session(path, cache)
    assert info.state == f"wrote-{fmt}"
    slot = next(cache.iterdir())
    assert (slot / sc.HINT_ORT).is_file() == (fmt == "ort")
    if fmt == "ort":  # the cache's own reason for the .ort tier is the failure ORT shows
        cause = back["error"].splitlines()[0].split("failed:", 1)[-1]  # past the file's path
        assert unquoted(cause) in unquoted((slot / sc.HINT_ORT).read_text())
    assert not (slot / sc.DISABLED).exists()
    for _ in range(2):  # converged: the second and later opens hit the same tier
        again, info = sc.cpu_session(path, cache)
        assert info.state == f"hit-{fmt}"
        np.testing.assert_array_equal(bench.generate(again, feed), expected)
    np.testing.assert_array_equal(bench.generate(first, feed), expected)


def test_export_generate_loop_builds_the_loop_beside_the_bundle(tmp_path: Path) -> None:
    """export.generate_loop=true: the plan's own step exports the loop for the CPU, checks its
    tokens against PyTorch's loop, opens it through the session cache cold and warm, and says
    which tier held it; the graph is published beside the bundle. Refused on HTP and for a
    model that is not an encoder-decoder, in one line each."""
    from tests.conftest import run_cli
    from tests.integration.conftest import run_json, step

    args = ("model=tiny_random", "model.random_init.model_type=bart", "quant=none",
            "perf=none", "verify=none", "export.generate_loop=true",
            "export.shapes.sequence_length=16", "export.shapes.decoder_sequence_length=8",
            "+model.random_init.config.init_std=0.5")  # tokens that vary with the step
    code, record, err = run_json(*args, "target=cpu", store=tmp_path / "store",
                                 outputs=tmp_path / "out")
    assert code == 0, err
    m = step(record, "generate_loop")["metrics"]
    assert m["loops"] == 1 and m["body_nodes"] > 0 and m["tokens_match_pytorch"]
    assert any(len(set(t[0][1:])) > 1 for t in m["tokens"])
    tier = m["cache_cold"].split("-")[1]  # the tier ORT could reload, measured, not assumed
    assert m["cache_cold"] == f"wrote-{tier}" and m["cache_warm"] == f"hit-{tier}"
    assert m["session_warm_s"] < m["session_cold_s"]
    assert (Path(record["outputs_dir"]) / "generate_loop.onnx").is_file()
    shown = run_cli("plan", *args, "target=cpu", "--store", str(tmp_path / "store"))
    assert "generate_loop" in shown.stdout and "masked=true" in shown.stdout
    for bad in (("target=qnn_htp",), ("target=cpu", "model.random_init.model_type=bert",
                                      "model.task=feature-extraction")):
        refused = run_cli("plan", *args, *bad, "--store", str(tmp_path / "store"))
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "export.generate_loop=true" in refused.stderr
