"""Eval where a reviewer looks: the run table and `report` (text, Markdown), a sweep's results
rows and accuracy matrix (`report <sweep dir>`), the diff of two run records, and the plan's
words for the eval step's data and gate. Hand-made run records and sweep summaries; the plans
are real (planner only)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from planner.models import evaluation
from planner.planning import plan_from_overrides
from planner.render import accuracy, matrix, render, results
from planner.render.run import markdown, table
from planner.review import rundiff
from tests.conftest import run_cli

KEY = "ab" * 32
DATA = "40 rows of /data/sst2.jsonl, split all (text=sentence, label=label); labels from label"


def eval_metrics(target: float = 0.8081, pytorch: float = 0.8123, max_drop: float = 0.01,
                 ep: str = "qnn", digest: str = "cd" * 32) -> dict[str, Any]:
    """What an eval step records (executors/evaluation/runner.py verdict())."""
    drop = round(pytorch - target, 6)
    passed = drop <= max_drop
    return {"task": "text-classification", "metric": "accuracy", "higher_is_better": True,
            "labelled": True, "against": "labels", "data": DATA, "samples": 40,
            "dataset_digest": digest,
            "scores": {"pytorch": {"accuracy": pytorch, "f1_macro": 0.80},
                       "fp32_onnx": {"accuracy": pytorch, "f1_macro": 0.80},
                       "target": {"accuracy": target, "f1_macro": 0.75}},
            "eval_pytorch": pytorch, "eval_fp32": pytorch, "eval_target": target,
            "eval_drop": drop, "eval_fp32_drop": 0.0, "max_drop": max_drop, "ep": ep,
            "eval_verdict": "PASS" if passed else "REGRESSION", "passed": passed,
            "verdict_line": "accuracy ...", "seconds": {"pytorch": 1.0, "fp32_onnx": 0.5,
                                                        "target": 2.0},
            "target_s_per_sample": 0.05,
            "regression": None if passed else "accuracy ... (REGRESSION); raise the precision"}


def step(sid: str, op: str, metrics: dict[str, Any] | None = None, status: str = "ok",
         error: str | None = None) -> dict[str, Any]:
    return {"id": sid, "op": op, "key": KEY, "action": "run", "status": status, "wall_s": 1.0,
            "peak_rss_mb": 100.0, "outputs": {}, "digests": {}, "metrics": metrics or {},
            "proof_check": None, "error": error}


def record(metrics: dict[str, Any] | None = None, choices: dict[str, str] | None = None,
           failed_at: str | None = None) -> dict[str, Any]:
    """A run record: resolve, compile, eval (a regression fails the eval step and the run)."""
    steps = [step("resolve", "resolve"), step("compile", "compile")]
    if failed_at == "compile":
        steps[1] = step("compile", "compile", status="failed", error="compile failed")
    elif metrics is not None:
        failed = metrics["eval_verdict"] == "REGRESSION"
        steps.append(step("eval", "eval", metrics, "failed" if failed else "ok",
                          f"step eval (eval): {metrics['regression']}" if failed else None))
    bad = next((s for s in steps if s["status"] == "failed"), None)
    return {"format_version": 1, "run_id": f"run-{id(steps)}", "status": "failed" if bad else "ok",
            "started": "2026-01-01T00:00:00+0000", "wall_s": 3.0, "executor": "local",
            "store": "/store", "config_digest": KEY, "overrides": ["quant=w8a8"],
            "deliverable": "compile", "outputs_dir": None, "steps": steps,
            "error": {"step": bad["id"], "message": bad["error"]} if bad else None,
            **({"choices": choices} if choices else {})}


def test_the_run_table_shows_every_metric_of_the_eval_step() -> None:
    text = table(record(eval_metrics()))
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("Eval: text-classification"))
    assert lines[head + 1].split() == ["metric", "PyTorch", "fp32", "ONNX", "target", "(qnn)",
                                       "drop", "max_drop", "verdict"]
    assert lines[head + 2].split() == ["accuracy", "*", "0.8123", "0.8123", "0.8081", "+0.0042",
                                       "0.01", "PASS"]
    assert lines[head + 3].split() == ["f1_macro", "0.8000", "0.8000", "0.7500", "+0.0500"]
    assert lines[head + 4] == f"  * the verdict's metric; data: {DATA}; data digest cdcdcdcdcdcd"
    assert "eval_target=0.8081" in text  # the step's note in the table


def test_a_regression_is_shown_from_the_failed_steps_record() -> None:
    rec = record(eval_metrics(target=0.70))
    rundiff.check_record(rec, "rec")
    text = table(rec)
    assert "Eval: text-classification (REGRESSION, the run failed on it)" in text
    assert "FAILED eval_target=0.7000" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("  accuracy *"))
    assert row.split()[-3:] == ["+0.1123", "0.01", "REGRESSION"]
    md = markdown(rec)
    assert "#### Eval: text-classification (REGRESSION, the run failed on it)" in md
    assert "| **accuracy** | 0.8123 | 0.8123 | 0.7000 | +0.1123 | 0.01 | **REGRESSION** |" in md
    assert "| f1_macro | 0.8000 | 0.8000 | 0.7500 | +0.0500 |  |  |" in md
    assert f"Data: {DATA}; data digest cdcdcdcdcdcd." in md


def test_no_eval_table_without_an_eval_step() -> None:
    rec = record()
    assert "Eval" not in table(rec) and "Eval" not in markdown(rec)
    assert accuracy.fields(rec) == dict.fromkeys(accuracy.FIELDS)


def test_a_lower_is_better_metric_drops_when_it_rises() -> None:
    m = {"task": "automatic-speech-recognition", "metric": "wer", "higher_is_better": False,
         "eval_drop": 0.05, "max_drop": 0.1, "eval_verdict": "PASS",
         "scores": {"pytorch": {"wer": 0.20, "cer": 0.10}, "fp32_onnx": {"wer": 0.20,
                                                                         "cer": 0.10},
                    "target": {"wer": 0.25, "cer": 0.08}}}
    rows = {r["metric"]: r for r in accuracy.metric_rows(m)}
    assert list(rows) == ["wer", "cer"]
    assert rows["wer"]["drop"] == 0.05 and rows["wer"]["verdict"] == "PASS"
    assert rows["cer"]["drop"] == pytest.approx(-0.02) and rows["cer"]["verdict"] is None


def test_the_run_schema_checks_eval_metrics() -> None:
    rec = record(eval_metrics())
    rundiff.check_record(rec, "rec")
    bad = copy.deepcopy(rec)
    bad["steps"][-1]["metrics"]["eval_verdict"] = "MAYBE"
    with pytest.raises(Exception, match="not a valid run record"):
        rundiff.check_record(bad, "bad")


def sweep(jobs: list[tuple[list[str], dict[str, Any] | None, str]]) -> dict[str, Any]:
    """A sweep summary (sweep.json) of (overrides, record, status) jobs."""
    out = []
    for i, (overrides, rec, status) in enumerate(jobs):
        err = (rec or {}).get("error") or {}
        out.append({"index": i, "overrides": overrides, "status": status,
                    "error": err.get("message") if rec else "config error", "record": rec})
    return {"format_version": 1, "sweep_dir": "/sweeps/1", "executor": "local", "wall_s": 9.0,
            "jobs": out, "steps": [], "rewrites": []}


def named(model: str, quant: str, target: str) -> dict[str, str]:
    return {"model": model, "quant": quant, "target": target}


@pytest.fixture()
def summary() -> dict[str, Any]:
    bert, mini = "model=bert", "model=minilm"
    return sweep([
        ([bert, "quant=none", "target=cpu"],
         record(eval_metrics(0.8123, ep="cpu"), named("bert", "none", "cpu")), "ok"),
        ([bert, "quant=none", "target=qnn_htp"],
         record(eval_metrics(0.8081), named("bert", "none", "qnn_htp")), "ok"),
        ([bert, "quant=w8a8", "target=cpu"],
         record(eval_metrics(0.7500, ep="cpu"), named("bert", "w8a8", "cpu")), "failed"),
        ([bert, "quant=w8a8", "target=qnn_htp"],
         record(None, named("bert", "w8a8", "qnn_htp"), failed_at="compile"), "failed"),
        ([mini, "quant=none", "target=cpu"], record(None, named("minilm", "none", "cpu")),
         "ok"),
        ([mini, "quant=none", "target=qnn_htp"], None, "failed"),
    ])


def test_results_rows_carry_the_eval_columns(summary: dict[str, Any]) -> None:
    rows = results.rows(summary)
    assert {k: rows[1][k] for k in accuracy.FIELDS} == {
        "eval_metric": "accuracy", "eval_pytorch": 0.8123, "eval_fp32": 0.8123,
        "eval_target": 0.8081, "eval_drop": 0.0042, "eval_verdict": "PASS"}
    assert rows[2]["eval_verdict"] == "REGRESSION"  # its metrics are kept in the failed record
    assert all(rows[i][k] is None for i in (3, 4, 5) for k in accuracy.FIELDS)
    assert "eval_verdict" in results.csv_text(rows).splitlines()[0]
    lines = results.table(summary).splitlines()
    assert lines[0].split()[-1] == "eval"
    assert lines[2].endswith("accuracy 0.8081 PASS")
    assert lines[3].endswith("accuracy 0.7500 REGRESSION") and lines[4].endswith(" -")


def test_the_accuracy_matrix_is_model_and_precision_by_target(summary: dict[str, Any]) -> None:
    md = matrix.markdown(summary)
    table_rows = [ln for ln in md if ln.startswith("|")]
    assert table_rows[0] == "| model | precision | metric | PyTorch | cpu | qnn_htp |"
    assert table_rows[2] == ("| bert | fp32 | accuracy | 0.8123 | 0.8123 (+0.0000) PASS | "
                             "0.8081 (\u22120.0042) PASS |")
    assert table_rows[3] == ("| bert | w8a8 | accuracy | 0.8123 | 0.7500 (\u22120.0623) "
                             "REGRESSION | failed at compile |")
    assert table_rows[4] == "| minilm | fp32 | - | - | no eval | config error |"
    assert f"- Data: {DATA}; data digest cdcdcdcdcdcd" in md
    text = matrix.text(summary)
    assert any(ln.split()[:3] == ["bert", "w8a8", "accuracy"] and "(-0.0623) REGRESSION" in ln
               for ln in text)


def test_other_swept_settings_get_their_own_rows() -> None:
    jobs = [([f"eval.max_drop={d}", "target=cpu"],
             record(eval_metrics(0.80, max_drop=d, ep="cpu"), named("bert", "w8a8", "cpu")),
             "ok") for d in (0.01, 0.05)]
    extra, rows, targets = matrix.build(sweep(jobs))
    assert extra == ["eval.max_drop"] and targets == ["cpu"]
    assert [r.label for r in rows] == [("bert", "w8a8", "eval.max_drop=0.01"),
                                       ("bert", "w8a8", "eval.max_drop=0.05")]


def test_report_reads_a_sweep_directory(summary: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text(json.dumps(summary))
    md = run_cli("report", str(tmp_path), "--format", "md")
    assert md.returncode == 0, md.stderr
    assert md.stdout.startswith("### modelplan sweep — Sweep: 6 jobs")
    assert "#### Accuracy" in md.stdout and "0.8081 (\u22120.0042) PASS" in md.stdout
    text = run_cli("report", str(tmp_path / "sweep.json"))
    assert "Accuracy (each target" in text.stdout and "Results: /sweeps/1/results.csv" in \
        text.stdout
    rows = json.loads(run_cli("report", str(tmp_path), "--format", "json").stdout)
    assert rows[0]["eval_target"] == 0.8123
    empty = run_cli("report", str(tmp_path / "nothing"))
    assert empty.returncode == 2 and "Traceback" not in empty.stderr


def test_the_diff_of_two_runs_shows_the_eval_change() -> None:
    old = record(eval_metrics(0.8081))
    new = record(eval_metrics(0.7000, max_drop=0.05, digest="ef" * 32))
    d = rundiff.diff(old, new)
    assert d["summary"]["eval_steps"] == 1
    e = d["eval"][0]
    assert e["verdict"] == ["PASS", "REGRESSION"] and not e["same_data"]
    acc = e["metrics"][0]
    assert acc["metric"] == "accuracy" and acc["verdict_metric"]
    assert acc["target"] == {"old": 0.8081, "new": 0.7, "delta": -0.1081}
    text = rundiff.render_text(d)
    assert "  eval: text-classification on qnn, verdict PASS -> REGRESSION (accuracy, " \
           "max_drop 0.01 -> 0.05)" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("    accuracy *"))
    assert row.split() == ["accuracy", "*", "0.8123", "->", "0.8123", "0.8081", "->", "0.7000",
                           "-0.1081"]
    assert "different data" in text
    assert text.rstrip().endswith("1 eval step(s).")
    md = rundiff.render_md(d)
    assert "**eval**: text-classification on qnn, verdict PASS \u2192 REGRESSION" in md
    assert "| **accuracy** | 0.8123 | 0.8123 | 0.8081 | 0.7000 | -0.1081 |" in md
    only_new = rundiff.diff(record(), new)["eval"][0]["metrics"][0]
    assert only_new["target"] == {"old": None, "new": 0.7, "delta": None}


def test_the_plan_says_the_eval_gate_and_its_data(tmp_path: Path) -> None:
    ir = plan_from_overrides(["model=tiny_bert", "eval=task", "eval.dataset.samples=8"],
                             store=str(tmp_path)).to_json()
    ev = next(s for s in ir["steps"] if s["op"] == "eval")
    text = render(ir, "text")
    assert f"gate: {evaluation.gate(ev['params'])}" in text
    assert "data: 8 of the shipped" in text and "agreement with PyTorch's predictions" in text
    md = render(ir, "md")
    assert f"- `eval` gate: {evaluation.gate(ev['params'])}" in md


def test_the_words_for_each_kind_of_dataset() -> None:
    base = {"task": "text-classification", "metric": "accuracy", "max_drop": 0.01, "ep": "qnn",
            "dataset_name": None, "split": None, "samples": 16, "shuffle": False, "seed": 0,
            "columns": {}, "dataset_digest": "shipped", "dataset": None,
            "dataset_kind": "shipped"}
    assert evaluation.summary(base) == ("16 of the shipped sentence pairs (no labels: "
                                        "agreement with PyTorch's predictions)")
    local = {**base, "dataset_kind": "file", "dataset": "/data/sst2.jsonl", "split": "train",
             "shuffle": True, "seed": 7, "columns": {"label": "y", "text": "s"},
             "dataset_digest": "ab" * 32}
    assert evaluation.summary({**local, "split": None}).startswith(
        "local file /data/sst2.jsonl: shuffled with seed 7, first 16 rows of the file; ")
    assert evaluation.summary(local) == (
        "local file /data/sst2.jsonl: shuffled with seed 7, first 16 rows of split train; "
        "columns label=y, text=s; labels from y; digest abababababab")
    hub = {**base, "dataset_kind": "symbolic", "dataset": "nyu-mll/glue",
           "dataset_name": "mrpc", "dataset_digest": "ef" * 32}
    said = evaluation.summary(hub)
    assert said.startswith("nyu-mll/glue (mrpc), not available on this machine")
    assert "split test (else validation, else the first)" in said
    assert "labels from a label column if it has one" in said
    asr = {**base, "task": "automatic-speech-recognition", "metric": "wer", "max_drop": 0.02}
    assert evaluation.gate(asr) == ("wer (automatic-speech-recognition) of the deliverable on "
                                    "qnn may rise at most 0.02 against PyTorch, else the run "
                                    "fails")
