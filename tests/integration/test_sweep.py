"""Sweeps for real on tiny_bert: one merged DAG, plain Hydra launchers sharing the store."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_cli

# fixed shapes on cpu too (free by default there), so that all four jobs export one graph
SWEEP = ("model=tiny_bert", "export.shapes.sequence_length=32", "verify.samples=2",
         "perf.iterations=2", "quant=w8a8,w8a16", "target=cpu,qnn_htp",
         "export.shapes.dynamic=false")


# The tests of the sweep's store run in this order on one xdist worker: the last adds runs to it.
IN_ORDER = pytest.mark.xdist_group("sweep")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    store = tmp_path_factory.mktemp("sweep-store")
    sweep_dir = tmp_path_factory.mktemp("sweep") / "run"
    result = run_cli("run", "-m", *SWEEP, "--store", str(store), "--sweep-dir", str(sweep_dir),
                     "--json", "-j", "2", timeout=1200)
    assert result.returncode == 0, result.stderr
    return {"summary": json.loads(result.stdout), "store": store, "dir": sweep_dir}


@IN_ORDER
def test_four_jobs_share_one_export(sweep: dict[str, Any]) -> None:
    s = sweep["summary"]
    assert [j["status"] for j in s["jobs"]] == ["ok"] * 4
    exports = [st for st in s["steps"] if st["op"] == "export"]
    assert len(exports) == 1 and exports[0]["jobs"] == [0, 1, 2, 3]
    assert exports[0]["action"] == "run"
    keys = [st["key"] for st in s["steps"]]
    assert len(keys) == len(set(keys))
    built = Counter(st["key"] for j in s["jobs"] for st in j["record"]["steps"]
                    if st["action"] == "run")
    assert built  # every job record shows the shared steps; the DAG ran each key once
    assert any(rw["rule"] == "sweep-CSE" for rw in s["rewrites"])


@IN_ORDER
def test_job_records_carry_real_times_and_the_executor(sweep: dict[str, Any]) -> None:
    s = sweep["summary"]
    assert s["executor"] == "local"
    for job in s["jobs"]:
        record = job["record"]
        assert record["executor"] == "local" and record["job"] == job["index"]
        assert 0 < record["wall_s"] <= s["wall_s"]  # from the sweep's start to its last step
        built = [st for st in record["steps"] if st["action"] == "run"]
        assert built and all(st["wall_s"] > 0 and st["peak_rss_mb"] > 0 for st in built)
    starts = {j["record"]["started"] for j in s["jobs"]}
    assert len(starts) == 1  # every job started with the sweep
    saved = [json.loads(p.read_text()) for p in (sweep["store"] / "runs").glob("*.json")]
    assert sorted(r["job"] for r in saved) == [0, 1, 2, 3]


@IN_ORDER
def test_results_files_list_every_job(sweep: dict[str, Any]) -> None:
    rows = list(csv.DictReader((sweep["dir"] / "results.csv").open()))
    assert [(r["quant"], r["target"]) for r in rows] == [
        ("w8a8", "cpu"), ("w8a8", "qnn_htp"), ("w8a16", "cpu"), ("w8a16", "qnn_htp")]
    assert all(r["status"] == "ok" and Path(r["artifact"]).is_file() for r in rows)
    assert all(float(r["cosine_mean"]) > 0.9 and float(r["latency_ms_median"]) > 0 for r in rows)
    assert len(json.loads((sweep["dir"] / "results.json").read_text())) == 4


@IN_ORDER
def test_cached_rerun_and_one_failing_job(sweep: dict[str, Any], tmp_path: Path) -> None:
    result = run_cli("run", "-m", *SWEEP, "verify.threshold=0.99,1.0", "--store",
                     str(sweep["store"]), "--sweep-dir", str(tmp_path / "again"), "--json",
                     timeout=1200)
    assert result.returncode == 1
    s = json.loads(result.stdout)
    status = Counter(j["status"] for j in s["jobs"])
    assert status == {"ok": 4, "failed": 4}  # threshold 1.0 fails verify only
    failed = [j for j in s["jobs"] if j["status"] == "failed"]
    assert all("verify.threshold=1.0" in j["overrides"] and "cosine_mean" in j["error"]
               for j in failed)
    ran = [st for st in s["steps"] if st["action"] == "run" and st["op"] not in ("verify", "perf")]
    assert ran == []  # everything but the new verify thresholds and perf came from the store


def _job(launcher: str, store: Path, sweep_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planner.cli.hydra_app", "-m", "model=tiny_bert", "quant=none",
         "target=cpu", "verify=none", "perf=none", "export.shapes.sequence_length=16,32",
         f"hydra/launcher={launcher}", f"store.path={store}", f"hydra.sweep.dir={sweep_dir}"],
        capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)


@pytest.mark.parametrize("launcher", ["joblib", "basic", "modelplan"])
def test_hydra_launchers_share_the_store(launcher: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = _job(launcher, store, tmp_path / "multirun")
    assert result.returncode == 0, result.stderr
    records = [json.loads(p.read_text()) for p in (store / "runs").glob("*.json")]
    assert len(records) == 2
    if launcher == "modelplan":  # one merged DAG: the shared step is one entry for both jobs
        steps = json.loads((tmp_path / "multirun" / "sweep.json").read_text())["steps"]
        resolve = [s for s in steps if s["op"] == "resolve"]
        assert len(resolve) == 1 and resolve[0]["jobs"] == [0, 1]
        assert resolve[0]["action"] == "run"
    else:  # separate jobs: the store's lock made the second one wait and reuse it
        built = Counter(s["key"] for r in records for s in r["steps"] if s["action"] == "run")
        assert max(built.values()) == 1
    shared = {s["key"] for s in records[0]["steps"]} & {s["key"] for s in records[1]["steps"]}
    assert len(shared) >= 1


def test_modelplan_launcher_with_a_user_config_dir(tmp_path: Path) -> None:
    from tests.teamconf import write_team_conf

    conf = write_team_conf(tmp_path)
    store = tmp_path / "store"
    result = subprocess.run(
        [sys.executable, "-m", "planner.cli.hydra_app", "-m", "--config-dir", str(conf),
         "model=our_plain,our_model", "quant=none", "target=cpu", "verify=none", "perf=none",
         "export.shapes.sequence_length=16", "hydra/launcher=modelplan", f"store.path={store}",
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
    assert result.returncode == 0, result.stderr
    jobs = json.loads((tmp_path / "multirun" / "sweep.json").read_text())["jobs"]
    assert [j["status"] for j in jobs] == ["ok", "ok"]
    assert [j["overrides"][0] for j in jobs] == ["model=our_plain", "model=our_model"]
