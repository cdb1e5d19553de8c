"""Warm workers (executors/run/workers.py) on real runs of tiny_bert: a chain of heavy steps stays
on one worker, records say when each step began and where it ran, a worker that grew past the
limit is replaced, and a crash in a chained step ends that step only."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from executors.local import LocalExecutor
from executors.run import workers
from planner.config.compose import compose
from planner.core.ops import OPS, Trait
from planner.planning import plan_for
from tests.conftest import ROOT
from tests.integration.conftest import CPU_RUN, run_json, step
from tests.integration.processes import assert_clean, step_process

HEAVY = ("resolve", "export", "normalize")  # CPU_RUN's heavy steps; tag runs in the run's process


def heavy(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in record["steps"] if s["action"] == "run" and OPS[s["op"]].has(Trait.HEAVY)]


def test_a_chain_runs_on_one_warm_worker_and_records_say_when(tmp_path: Path) -> None:
    code, record, err = run_json(*CPU_RUN, store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    assert record["executor"] == "local"
    assert [s["id"] for s in heavy(record)] == list(HEAVY)
    assert {s["worker"] for s in heavy(record)} == {"w1"}
    assert "worker" not in step(record, "tag")  # not heavy: it ran in the run's own process
    built = [s for s in record["steps"] if s["action"] == "run"]
    for before, after in itertools.pairwise(built):  # a chain: one after another
        assert after["start_s"] >= before["start_s"] + before["wall_s"] - 0.01
    last = built[-1]
    assert last["start_s"] + last["wall_s"] <= record["wall_s"] + 0.01


def test_a_worker_that_grew_past_the_limit_is_replaced(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "RECYCLE_MB", -1.0)  # every step leaves its worker too big
    config = compose(list(CPU_RUN))
    config["store"]["path"] = str(tmp_path / "store")
    record = LocalExecutor(tmp_path / "store", quiet=True).run(plan_for(config).to_json(), None)
    assert record["status"] == "ok", record["error"]
    assert [s["worker"] for s in heavy(record)] == ["w1", "w2", "w3"]


def test_a_crash_in_a_chained_sweep_step_ends_that_step_only(tmp_path: Path) -> None:
    store, sweep_dir = tmp_path / "store", tmp_path / "sweep"
    sweep = ("model=tiny_bert", "quant=none", "target=cpu", "verify=none", "perf=none",
             "export.shapes.sequence_length=16,32")
    run = subprocess.Popen([sys.executable, "-m", "planner.cli.main", "run", "-m", *sweep, "-j", "1",
                            "--store", str(store), "--sweep-dir", str(sweep_dir), "--json"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    step_process(run, "normalize").send_signal(signal.SIGKILL)  # on the worker export used
    out, err = run.communicate(timeout=600)
    assert run.returncode == 1, err
    jobs = json.loads(out)["jobs"]
    assert sorted(j["status"] for j in jobs) == ["failed", "ok"]
    failed = next(j for j in jobs if j["status"] == "failed")
    assert "step normalize (normalize) was killed by signal 9" in failed["error"]
    assert [s["status"] for s in failed["record"]["steps"][:2]] == ["ok", "ok"]
    ran = {s["worker"] for j in jobs for s in heavy(j["record"]) if s["status"] == "ok"}
    assert len(ran) == 2  # with -j 1 one worker runs everything until it is killed
    assert_clean(store)
