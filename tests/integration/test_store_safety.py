"""The store under stress: a run killed mid-step, concurrent runs, a proof that fails at run
time, corrupt entries."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import onnx

from executors.onnx.artifacts import FACTS_KEY
from executors.store.content import file_stamp
from planner.support.digests import file_sha256
from tests.conftest import ROOT, run_cli
from tests.integration.conftest import CPU_RUN, run_json, step, store_copy


def start_run(store: Path, outputs: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "planner.cli.main", "run", *CPU_RUN, *extra,
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


def _reseal(entry: Path) -> None:
    """Rewrite an entry's manifest to match its files, as if a step had written them so."""
    manifest = json.loads((entry / "manifest.json").read_text())
    names = [p.relative_to(entry).as_posix() for p in sorted(entry.rglob("*")) if p.is_file()]
    manifest["files"] = {name: file_sha256(entry / name) for name in names
                         if name != "manifest.json"}
    manifest["verified"] = {name: file_stamp(entry / name) for name in manifest["files"]}
    (entry / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def test_a_lying_stamp_is_caught_by_the_checkers(tmp_path: Path,
                                                 cpu_run: dict[str, Any]) -> None:
    """normalize's entry holds the raw export but keeps its stamp claiming `normalized`: the
    elision of optimize is re-checked by observing the model, not by reading the stamp."""
    store = store_copy(cpu_run, tmp_path / "store")  # the lie goes into a store of its own
    record = cpu_run["record"]
    normalized = store / Path(step(record, "normalize")["outputs"]["model.onnx"]).relative_to(
        cpu_run["store"])
    raw = onnx.load(step(record, "export")["outputs"]["model.onnx"], load_external_data=False)
    graph = onnx.load(str(normalized), load_external_data=False)
    stamp = {p.key: p.value for p in graph.metadata_props}[FACTS_KEY]
    assert "normalized" in json.loads(stamp)["facts"]
    for prop in raw.metadata_props:
        if prop.key == FACTS_KEY:
            prop.value = stamp  # the lie: an un-normalized graph that says it is normalized
    onnx.save(raw, str(normalized))
    for blob in (Path(step(record, "export")["outputs"]["model.onnx"]).parent / "weights").iterdir():
        if not (normalized.parent / "weights" / blob.name).exists():  # the raw graph's weights
            shutil.copyfile(blob, normalized.parent / "weights" / blob.name)
    _reseal(normalized.parent)
    assert run_cli("store", "verify", "--store", str(store)).returncode == 0  # not corrupt
    code, again, err = run_json(*CPU_RUN, store=store, outputs=tmp_path / "b")
    assert code == 0, err
    opt = step(again, "optimize")
    assert opt["action"] == "run" and opt["proof_check"]["held"] is False
    assert "normalized" in opt["proof_check"]["detail"]
    assert "basic pass" in opt["proof_check"]["detail"]
    assert step(again, "tag")["key"] != step(record, "tag")["key"]  # re-keyed downstream
    final = onnx.load(again["published"]["model.onnx"])
    facts = json.loads({p.key: p.value for p in final.metadata_props}[FACTS_KEY])["facts"]
    assert facts["normalized"]["by"] == "optimize"  # established by the step that ran


def test_elision_off_builds_the_same_artifact(cpu_run: dict[str, Any], tmp_path: Path) -> None:
    code, off, err = run_json(*CPU_RUN, "planner.rules.elide=false", store=cpu_run["store"],
                              outputs=tmp_path)
    assert code == 0, err
    assert step(off, "optimize")["action"] == "run"

    def without_stamp(path: str) -> bytes:
        model = onnx.load(path, load_external_data=False)
        keep = [p for p in model.metadata_props if p.key != FACTS_KEY]
        del model.metadata_props[:]
        model.metadata_props.extend(keep)
        return model.SerializeToString(deterministic=True)

    on_model = cpu_run["record"]["published"]["model.onnx"]
    assert without_stamp(off["published"]["model.onnx"]) == without_stamp(on_model)


def test_fusion_build_without_separate_normalize_builds_the_same_artifact(
        cpu_run: dict[str, Any], tmp_path: Path) -> None:
    fusions = [*CPU_RUN, "optim=transformer"]
    code, on, err = run_json(*fusions, store=cpu_run["store"], outputs=tmp_path / "on")
    assert code == 0, err
    normalize = step(on, "normalize")
    assert normalize["action"] == "elided" and normalize["proof_check"]["held"] is True
    assert step(on, "optimize")["metrics"]["ort_passes_to_normalize"] >= 1
    code, off, err = run_json(*fusions, "planner.rules.elide=false", store=cpu_run["store"],
                              outputs=tmp_path / "off")
    assert code == 0, err
    assert step(off, "normalize")["action"] in ("run", "cached")
    assert step(off, "optimize")["metrics"]["fused_ops"] == \
        step(on, "optimize")["metrics"]["fused_ops"]
    assert _without_stamp(off["published"]["model.onnx"]) == \
        _without_stamp(on["published"]["model.onnx"])


def _without_stamp(path: str) -> bytes:
    model = onnx.load(path)
    keep = [p for p in model.metadata_props if p.key != FACTS_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    return model.SerializeToString(deterministic=True)
