"""`modelplan diagnose` end to end: a quantized build's modules ranked by SQNR against the fp32
graph, on tiny_bert (fast) and on the packaged MiniLM at w8a8 (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli, run_cli_here
from tests.integration.conftest import minilm_store

TINY = ("model=tiny_bert", "export.shapes.sequence_length=32", "quant=w8a8", "target=cpu")


def diagnose(store: Path, *args: str) -> tuple[int, Any, str, str]:
    result = run_cli_here("diagnose", *args, "--store", str(store), "--quiet")
    data = json.loads(result.stdout) if result.stdout.startswith("{") else None
    return result.returncode, data, result.stdout, result.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    store = tmp_path_factory.mktemp("diagnose-store")
    code, data, _out, err = diagnose(store, *TINY, "--json")
    assert code == 0, err
    return {"store": store, "data": data}


def test_every_module_of_tiny_bert_has_sqnr_and_cosine(tiny: dict[str, Any]) -> None:
    data = tiny["data"]
    rows = {r["tag"]: r for r in data["modules"]}
    assert data["candidate_step"] == "tag" and data["samples"] == 4
    for tag in ("/BertModel", "/BertModel/BertEmbeddings", "/BertModel/BertEncoder",
                "/BertModel/BertEncoder/BertLayer.1/BertAttention/BertSelfAttention"):
        assert tag in rows
    for r in rows.values():
        assert r["outputs"] >= 1 and r["nodes"] >= 1 and 0 < r["cosine"] <= 1 + 1e-9
        assert math.isfinite(r["sqnr_db"]) and r["sqnr_db"] > 0
    layer = "/BertModel/BertEncoder/BertLayer.1"
    # a layer's output is its BertOutput's output: a parent aggregates its children
    assert rows[layer]["sqnr_db"] == pytest.approx(rows[f"{layer}/BertOutput"]["sqnr_db"])
    assert rows[layer]["nodes"] > sum(r["nodes"] for t, r in rows.items()
                                      if t.startswith(f"{layer}/BertAttention/"))
    whole = data["graph"]
    assert 0.99 < whole["cosine"] <= 1 and whole["sqnr_db"] > 10
    # own error: every module's piece ran on the fp32 values; the embeddings read only the
    # graph's inputs, so they inherit nothing; a later module is better alone than in the graph
    assert all(r["own_sqnr_db"] is not None and "own_error" not in r for r in rows.values())
    assert rows["/BertModel/BertEmbeddings"]["inherited"] == pytest.approx(0, abs=1e-6)
    out = rows[f"{layer}/BertOutput"]
    assert out["own_sqnr_db"] > out["sqnr_db"] and out["inherited"] > 0


def test_the_text_ranks_the_worst_module_first_and_draws_the_tree(tiny: dict[str, Any]) -> None:
    code, _data, out, err = diagnose(tiny["store"], *TINY, "--top", "3")
    assert code == 0, err
    rows = tiny["data"]["modules"]
    tags = [r["tag"] for r in rows]
    inner = [r for r in rows if not any(t.startswith(r["tag"] + "/") for t in tags)]
    worst = min(inner, key=lambda r: r["own_sqnr_db"])
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines)
                if ln.startswith("Worst innermost modules by own error"))
    root = lines[head + 1].split("(under ")[1].split(")")[0]
    assert lines[head + 2].split()[0] == worst["tag"].removeprefix(root + "/")
    assert "Module tree:" in lines and "more innermost modules" in out
    assert lines[-1].startswith(f"Worst: {worst['tag']}, own ")


def test_a_long_diagnose_says_how_long_and_how_far(tiny: dict[str, Any]) -> None:
    """Without --quiet: after the first sample, how long the others will take; then progress
    each tenth of the way."""
    result = run_cli("diagnose", *TINY, "--store", str(tiny["store"]), "--samples", "20",
                     "--json")
    assert result.returncode == 0, result.stderr
    lines = [ln.strip() for ln in result.stderr.splitlines() if "diagnose:" in ln]
    assert lines[0] == "diagnose: making 20 verify input(s)"
    assert lines[1].startswith("diagnose: 20 samples at ") and " s more " in lines[1]
    assert [ln.split(",")[0] for ln in lines[2:]] == \
        [f"diagnose: sample {n}/20" for n in range(2, 20, 2)]
    assert json.loads(result.stdout)["samples"] == 20


def test_verify_none_is_read_as_the_build_diagnose_runs_anyway(tiny: dict[str, Any]) -> None:
    code, data, _out, err = diagnose(tiny["store"], *TINY, "verify=none", "--json")
    assert code == 0, err
    assert data["modules"] == tiny["data"]["modules"]


def test_an_unquantized_build_is_refused_with_a_fix(tmp_path: Path) -> None:
    code, _data, _out, err = diagnose(tmp_path, "model=tiny_bert", "quant=none", "target=cpu")
    assert code != 0 and "quant=w8a16_pc`" in err and "Traceback" not in err


@pytest.mark.slow
def test_the_worst_pieces_run_on_the_htp_beside_the_cpu(tmp_path: Path) -> None:
    """--target-pieces 2 on qnn_htp: the two worst innermost modules' pieces compiled for the
    HTP simulator, fed the fp32 values; they agree with the same pieces on the CPU EP within
    a few dB (a tiny w8a8 model has no HTP-only loss)."""
    htp = ("model=tiny_bert", "export.shapes.sequence_length=32", "quant=w8a8",
           "target=qnn_htp")
    code, data, _out, err = diagnose(tmp_path, *htp, "--target-pieces", "2", "--json")
    assert code == 0, err
    found = data["target_pieces"]
    assert found["target"] == "qnn_htp" and found["samples"] == 2
    rows = {r["tag"]: r for r in data["modules"]}
    assert len(found["modules"]) == 2
    for r in found["modules"]:
        assert "error" not in r and not any(t.startswith(r["tag"] + "/") for t in rows)
        assert r["cpu_sqnr_db"] > 15 and abs(r["target_sqnr_db"] - r["cpu_sqnr_db"]) < 3
        assert 0.99 < r["target_cosine"] <= 1 + 1e-9
    code, _data, _out, err = diagnose(tmp_path, *TINY, "--on", "target")
    assert code != 0 and "set target=qnn_htp" in err and "Traceback" not in err


def record_file(outputs: Path) -> Path:
    """A run's record: run.json in its folder, or a failed first run's beside the folder."""
    return next(p for p in outputs.rglob("*.json") if p.name.endswith(("run.json", "failed.json")))


def record_of(outputs: Path) -> dict[str, Any]:
    return json.loads(record_file(outputs).read_text())


def test_a_failed_verify_puts_the_modules_in_the_record_and_the_report(
        tiny: dict[str, Any], tmp_path: Path) -> None:
    """verify.threshold=0.99999 cannot be reached at w8a8: the run fails, and its record says
    where the accuracy went (the diagnosis of its own tag and normalize entries); a passing
    run of the same build has no rows."""
    from planner.review import rundiff

    store = str(tiny["store"])
    failed = run_cli_here("run", *TINY, "verify.threshold=0.99999", "perf=none", "--store", store,
                          "--outputs", str(tmp_path / "failed"))
    assert failed.returncode == 1, failed.stderr
    assert "Where the accuracy goes" in failed.stdout and "Traceback" not in failed.stderr
    rec = record_of(tmp_path / "failed")
    rundiff.check_record(rec, "run.json")
    rows = {r["tag"]: r for r in rec["accuracy"]}
    assert rows == {r["tag"]: {k: r[k] for k in rows[r["tag"]]} for r in tiny["data"]["modules"]}
    md = run_cli("report", str(record_file(tmp_path / "failed")), "--format", "md")
    worst = min(rec["accuracy"], key=lambda r: r["own_sqnr_db"])
    assert "Where the accuracy goes (5 worst of" in md.stdout and f"`{worst['tag']}`" in md.stdout
    passed = run_cli_here("run", *TINY, "perf=none", "--store", store, "--outputs",
                          str(tmp_path / "passed"))
    assert passed.returncode == 0, passed.stderr
    assert "accuracy" not in record_of(tmp_path / "passed")
    assert "Where the accuracy goes" not in passed.stdout


def test_an_eval_regression_puts_the_modules_in_the_record(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """eval.max_drop=0 on a w8a8 embedder is a regression (eval's gate): the record has the
    diagnosis of the tag step against eval's fp32 reference, though verify is off."""
    from tests.checkpoints import text_checkpoint
    from tests.conftest import shared_dir
    from tests.integration.conftest import run_json

    ckpt = text_checkpoint(shared_dir(tmp_path_factory) / "eval-embedder", cls="BertModel")
    code, rec, err = run_json("model=local_hf", f"model.path={ckpt}", "target=cpu",
                              "quant=w8a8", "export.shapes.sequence_length=32", "perf=none",
                              "verify=none", "eval=task", "eval.max_drop=0",
                              store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 1 and "REGRESSION" in err
    assert next(s for s in rec["steps"] if s["op"] == "eval")["metrics"]["regression"]
    assert len(rec["accuracy"]) > 5 and "accuracy_error" not in rec
    assert all(r["own_sqnr_db"] is not None for r in rec["accuracy"])


@pytest.mark.slow
def test_minilm_w8a8_names_the_modules_that_lose_accuracy(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # in the store the session's MiniLM builds share: the CPU export is test_minilm's
    code, data, _out, err = diagnose(minilm_store(tmp_path_factory), "model=minilm", "quant=w8a8",
                                     "target=cpu", "--json")
    assert code == 0, err
    rows = sorted(data["modules"], key=lambda r: r["sqnr_db"])
    assert data["graph"]["cosine"] < 0.99  # the known drop of the whole model
    assert len(rows) > 20 and rows[0]["sqnr_db"] < rows[-1]["sqnr_db"]
    assert all(0 < r["cosine"] <= 1 + 1e-9 for r in rows)
    # most of a late module's cumulative loss is inherited: its own error is far smaller
    assert all(r["own_sqnr_db"] is not None for r in rows)
    assert max(r["inherited"] for r in rows) > 10


def test_an_fp16_build_gets_its_own_error_without_warnings(tmp_path: Path) -> None:
    """fp16 pieces are fed the fp32 values as float16 (what the fp16 graph holds there), so
    each has an own error; no numpy overflow warning reaches the user (mask constants)."""
    args = ("model=tiny_bert", "export.shapes.sequence_length=32", "quant=fp16", "target=cpu")
    code, data, _out, err = diagnose(tmp_path / "store", *args, "--json")
    assert code == 0, err
    assert "Warning" not in err, err
    assert data["quant"] == "fp16" and data["target"] == "cpu"
    for r in data["modules"]:
        assert "own_error" not in r and math.isfinite(r["own_sqnr_db"]) and r["own_sqnr_db"] > 20
    code, _data, out, err = diagnose(tmp_path / "store", *args)
    assert code == 0 and "own - dB" not in out and "Warning" not in err
    assert out.startswith("Accuracy per module: tag (quant=fp16, target=cpu; ")
