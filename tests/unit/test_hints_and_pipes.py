"""Every command a hint prints works as printed, and a closed stdout ends a command quietly."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from executors.store.content import Store
from planner.core.planfile import load_plan
from tests.conftest import ROOT, run_cli, run_cli_here

HINT = re.compile(r"`(modelplan [^`]*)`")
PLACEHOLDER = re.compile(r"\b[A-Z]{2,}\b|\.\.\.|[<\[]")


def hinted(stderr: str) -> list[str]:
    """The modelplan commands an error message tells the user to run, as argument lists."""
    return [shlex.split(cmd)[1:] for cmd in HINT.findall(stderr)]


def test_the_apply_hint_writes_a_plan_that_apply_reads(tmp_path: Path) -> None:
    missing = run_cli("apply", "plan.json", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    (command,) = hinted(missing.stderr)
    assert run_cli(*command, "model=tiny_bert", cwd=tmp_path).returncode == 0
    load_plan(tmp_path / "plan.json")  # JSON, schema-valid, every key as recomputed here
    garbled = tmp_path / "other.json"
    garbled.write_text("modelplan plan  model=tiny_bert\n")
    again = run_cli("apply", str(garbled), cwd=tmp_path)
    assert again.returncode == 2 and hinted(again.stderr) == [command]


def test_plan_output_format_follows_the_suffix_unless_told(tmp_path: Path) -> None:
    for name, start in (("a.json", "{"), ("a.md", "###"), ("a.txt", "modelplan plan")):
        assert run_cli("plan", "model=tiny_bert", "-o", str(tmp_path / name)).returncode == 0
        assert (tmp_path / name).read_text().startswith(start), name
    refused = run_cli("plan", "--format", "text", "-o", str(tmp_path / "b.json"))
    assert refused.returncode == 2 and "a .json file holds the plan as JSON" in refused.stderr
    assert not (tmp_path / "b.json").exists()


def test_the_unknown_key_hint_runs() -> None:
    result = run_cli("plan", "quant.per_chanel=true")
    assert result.returncode == 2
    for command in hinted(result.stderr):
        assert run_cli(*command).returncode == 0, command


def test_the_store_verify_hint_names_the_store_it_checked(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    entry = store.root / "ab" / ("ab" + "0" * 62)
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text('{"files": {"model.onnx": "' + "0" * 64 + '"}}')
    (entry / "model.onnx").write_text("not what the manifest says")
    result = run_cli("store", "verify", "--store", str(store.root), cwd=tmp_path)
    assert "1 corrupt" in result.stdout, result.stdout
    (command,) = HINT.findall(result.stdout)
    assert run_cli(*shlex.split(command)[1:], cwd=tmp_path).returncode == 0
    assert "0 corrupt" in run_cli("store", "verify", "--store", str(store.root)).stdout


def test_printed_hints_are_commands_not_templates() -> None:
    """Every `modelplan ...` in a message (not a docstring or comment) can be run as printed."""
    bad = []
    for path in [*ROOT.glob("planner/**/*.py"), *ROOT.glob("executors/**/*.py")]:
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docs:
                bad += [f"{path.relative_to(ROOT)}: {c}" for c in HINT.findall(node.value)
                        if PLACEHOLDER.search(c)]
    assert bad == []


def test_diagnose_of_an_unquantized_build_hints_a_diagnose_that_runs(tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "store")]
    refused = run_cli("diagnose", "model=tiny_bert", "quant=none", *store, "--quiet")
    assert refused.returncode == 2 and "target=cpu" not in refused.stderr
    (command,) = hinted(refused.stderr)
    assert "quant=w8a16_pc" in command and "quant=none" not in command
    ran = run_cli_here(*command, "target=cpu", *store, "--quiet", "--top", "1")
    assert ran.returncode == 0, ran.stderr
    assert "quant=w8a16_pc, target=cpu" in ran.stdout.splitlines()[0]


def test_a_failed_gate_hints_the_diagnose_of_the_build_that_failed(tmp_path: Path) -> None:
    """The `modelplan diagnose` a w8a8 verify failure prints diagnoses that w8a8 build."""
    failed = run_cli_here("run", "model=tiny_bert", "quant=w8a8", "target=cpu", "perf=none",
                          "verify.threshold=1.0", "--store", str(tmp_path / "store"),
                          "--outputs", str(tmp_path / "out"))
    assert failed.returncode == 1, failed.stderr
    (command,) = [c for c in hinted(failed.stdout) if c[0] == "diagnose"]
    assert "quant=w8a8" in command and "target=cpu" in command
    ran = run_cli_here(*command, "--quiet", "--top", "1")
    assert ran.returncode == 0, ran.stderr
    assert "quant=w8a8, target=cpu" in ran.stdout.splitlines()[0]


@pytest.mark.parametrize("args", [["plan"], ["schema"], ["store", "ls"]])
def test_a_closed_stdout_ends_quietly(args: list[str], tmp_path: Path) -> None:
    if args[0] == "store":
        args = [*args, "--store", str(Store(tmp_path / "store").root)]
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli.main", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command writes anything
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""
