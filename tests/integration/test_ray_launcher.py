"""`modelplan-job -m ... hydra/launcher=ray`: Hydra's Ray launcher runs each job as a Ray task
(on a Ray it starts on loopback); the jobs share the store, whose locks build each key once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.raycluster import local_ray_env, short_tmp

# One Ray at a time: each starts its own on this machine (xdist runs the group on one worker).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


def test_hydra_ray_launcher_runs_jobs_as_ray_tasks_sharing_the_store(tmp_path: Path) -> None:
    store, temp = tmp_path / "store", short_tmp("mpray-")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "planner.cli.hydra_app", "-m", "model=tiny_bert", "quant=none",
             "target=cpu", "verify=none", "perf=none", "export.shapes.sequence_length=16,32",
             "hydra/launcher=ray", f"store.path={store}",
             f"hydra.sweep.dir={tmp_path / 'multirun'}",
             "+hydra.launcher.ray.init.num_cpus=2",
             "+hydra.launcher.ray.init.include_dashboard=false",
             f"+hydra.launcher.ray.init._temp_dir={temp}"],
            capture_output=True, text=True, cwd=ROOT, timeout=900, check=False,
            env={**os.environ, **local_ray_env()})
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in result.stdout + result.stderr
    records = [json.loads(p.read_text()) for p in (store / "runs").glob("*.json")]
    assert sorted(r["status"] for r in records) == ["ok", "ok"]
    built = Counter(s["key"] for r in records for s in r["steps"] if s["action"] == "run")
    assert max(built.values()) == 1  # the shared resolve was built by one job only
    shared = {s["key"] for s in records[0]["steps"]} & {s["key"] for s in records[1]["steps"]}
    assert len(shared) >= 1
