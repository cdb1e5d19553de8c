"""Bad input from the command line: one clear line, exit 2, nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli


def one_error(result, needle: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("modelplan: error: ") or "error:" in lines[-1]
    assert needle in result.stderr and "Traceback" not in result.stderr


@pytest.fixture()
def saved_plan(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    result = run_cli("plan", "model=tiny_bert", "--format", "json", "-o", str(path),
                     "--store", str(tmp_path / "store"))
    assert result.returncode == 0, result.stderr
    return path


def test_unwritable_outputs_and_bad_names(tmp_path: Path) -> None:
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    one_error(run_cli("plan", "-o", str(tmp_path)), "cannot write it (it is a directory)")
    assert not list(tmp_path.glob(".*.tmp"))
    one_error(run_cli("run", "model=tiny_bert", "--outputs", str(afile), "--store",
                      str(tmp_path / "s")), "--outputs")
    one_error(run_cli("run", "model=tiny_bert", "--name", "../escape", "--store",
                      str(tmp_path / "s")), "--name")
    one_error(run_cli("run", "-m", "quant=w8a8,w8a16", "--sweep-dir", str(afile), "--store",
                      str(tmp_path / "s")), "--sweep-dir")
    one_error(run_cli("store", "ls", "--store", str(tmp_path / "typo")), "no store there")
    assert not (tmp_path / "typo").exists()


def test_sweep_mistakes(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    one_error(run_cli("plan", "-m", "quant=w8a8,bogus", "--format", "json", "-o", str(out)),
              "job 1 (quant=bogus)")
    assert not out.exists()
    one_error(run_cli("plan", "-m", "quant=range(0)"), "no values")
    one_error(run_cli("plan", "quant=w8a8,w8a16"), "add -m")
    one_error(run_cli("plan", "-m", "--format", "mermaid", "quant=w8a8,w8a16"), "text or json")
    one_error(run_cli("run", "-m", "quant=w8a8", "-j", "0"), "must be 1 or more")


def test_edited_plans_are_refused_by_apply_and_diff(saved_plan: Path, tmp_path: Path) -> None:
    ir = json.loads(saved_plan.read_text())
    edited = json.loads(saved_plan.read_text())
    quantize = next(s for s in edited["steps"] if s["op"] == "quantize")
    quantize["params"]["activation_type"] = "uint8"
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(edited))
    one_error(run_cli("diff", str(saved_plan), str(bad)), "key does not match its content")
    for change in ({"deliverable": "nope"}, {"steps": ir["steps"] + ir["steps"][-1:]}):
        bad.write_text(json.dumps({**ir, **change}))
        result = run_cli("apply", str(bad), "--store", str(tmp_path / "store"))
        one_error(result, "re-plan")
    one_error(run_cli("apply", str(saved_plan), "quant=w8a16"), "unexpected argument")


def test_checkpoint_without_weights_fails_at_plan_time(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert",
                                                      "architectures": ["BertModel"]}))
    one_error(run_cli("plan", "model=local_hf", f"model.path={tmp_path}"), "no weights")


def test_one_line_per_bad_value() -> None:
    result = run_cli("plan", "verify.threshold=abc")
    one_error(result, "verify.threshold: 'abc' is not a number")
    assert len(result.stderr.strip().splitlines()) == 1
