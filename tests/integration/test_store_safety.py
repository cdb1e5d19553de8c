"""The store under stress: a run killed mid-step, concurrent runs, a proof that fails at run
time, corrupt entries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import onnx

from executors.artifacts import FACTS_KEY
from tests.conftest import ROOT, run_cli
from tests.integration.conftest import CPU_RUN, run_json, step


def start_run(store: Path, outputs: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "planner.cli", "run", *CPU_RUN, *extra,
                             "--store", str(store), "--outputs", str(outputs), "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_mid_step_then_rerun_is_clean(tmp_path: Path) -> None:
    store, outputs = tmp_path / "store", tmp_path / "out"
    proc = start_run(store, outputs)
    deadline = time.time() + 300
    while time.time() < deadline:  # wait until a build directory exists: a step is mid-way
        tmp = store / "tmp"
        if tmp.is_dir() and any(p.name.count(".") == 2 for p in tmp.iterdir()):
            break
        time.sleep(0.02)
    else:
        proc.kill()
        raise AssertionError("no step started within 300 s")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    entries_before = {p.name for p in store.glob("??/*")}
    code, record, err = run_json(*CPU_RUN, store=store, outputs=outputs)
    assert code == 0, err
    assert {s["status"] for s in record["steps"]} == {"ok"}
    assert run_cli("store", "verify", "--store", str(store)).returncode == 0
    for key in entries_before:  # whatever existed after the kill was complete
        assert (next(store.glob(f"??/{key}")) / "manifest.json").is_file()
    gc = run_cli("store", "gc", "--store", str(store))
    assert gc.returncode == 0 and "1 stale temporary dir(s)" in gc.stdout


def test_concurrent_runs_build_each_key_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    procs = [start_run(store, tmp_path / f"out{i}") for i in range(2)]
    records = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        records.append(json.loads(out))
    built = Counter(s["key"] for r in records for s in r["steps"] if s["action"] == "run")
    assert built and max(built.values()) == 1
    keys = [[s["key"] for s in r["steps"]] for r in records]
    assert keys[0] == keys[1]


def test_elision_whose_premise_fails_on_the_real_input_runs(tmp_path: Path,
                                                            cpu_run: dict[str, Any]) -> None:
    store = tmp_path / "store"
    code, record, err = run_json(*CPU_RUN, store=store, outputs=tmp_path / "a")
    assert code == 0, err
    normalized = Path(step(record, "normalize")["outputs"]["model.onnx"])
    model = onnx.load(str(normalized))
    for prop in model.metadata_props:  # the artifact no longer claims to be normalized
        if prop.key == FACTS_KEY:
            stamp = json.loads(prop.value)
            del stamp["facts"]["normalized"]
            prop.value = json.dumps(stamp)
    onnx.save(model, str(normalized))
    code, again, err = run_json(*CPU_RUN, store=store, outputs=tmp_path / "b")
    assert code == 0, err
    opt = step(again, "optimize")
    assert opt["action"] == "run" and opt["proof_check"]["held"] is False
    assert "normalized" in opt["proof_check"]["detail"]
    assert step(again, "tag")["key"] != step(record, "tag")["key"]  # re-keyed downstream
    verify = run_cli("store", "verify", "--store", str(store))
    assert verify.returncode == 1 and "corrupt" in verify.stdout
    fixed = run_cli("store", "verify", "--remove", "--store", str(store))
    assert fixed.returncode == 0


def test_elision_off_builds_the_same_artifact(cpu_run: dict[str, Any], tmp_path: Path) -> None:
    code, off, err = run_json(*CPU_RUN, "planner.rules.elide=false", store=cpu_run["store"],
                              outputs=tmp_path)
    assert code == 0, err
    assert step(off, "optimize")["action"] == "run"

    def without_stamp(path: str) -> bytes:
        model = onnx.load(path)
        keep = [p for p in model.metadata_props if p.key != FACTS_KEY]
        del model.metadata_props[:]
        model.metadata_props.extend(keep)
        return model.SerializeToString(deterministic=True)

    on_model = cpu_run["record"]["published"]["model.onnx"]
    assert without_stamp(off["published"]["model.onnx"]) == without_stamp(on_model)
