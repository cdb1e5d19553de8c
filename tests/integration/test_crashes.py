"""Steps that die from a signal (a segfault in a runtime, the kernel's OOM killer): real signals
sent to the real step process (`mp:<step>`, a child of `modelplan run`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.integration.conftest import CPU_RUN, run_json
from tests.integration.processes import assert_clean, start, step_process

SWEEP = ("model=tiny_bert", "quant=none", "target=cpu", "verify=none", "perf=none",
         "export.shapes.sequence_length=16,32")


def test_a_step_killed_by_a_signal_is_reported_and_the_rerun_is_clean(tmp_path: Path) -> None:
    store, outputs = tmp_path / "store", tmp_path / "out"
    for step_id, sig, cause in (("export", signal.SIGSEGV, "SIGSEGV; a crash in native code"),
                                ("normalize", signal.SIGKILL, "SIGKILL; out of memory?")):
        run = start(*CPU_RUN, store=store, outputs=outputs)
        step_process(run, step_id).send_signal(sig)
        out, err = run.communicate(timeout=300)
        assert run.returncode == 1, err
        assert f"step {step_id} ({step_id}) was killed by signal {int(sig)} ({cause})" in err
        assert "Traceback" not in err
        record = json.loads(out)
        failed = next(s for s in record["steps"] if s["id"] == step_id)
        assert failed["status"] == "failed" and f"signal {int(sig)}" in failed["error"]
        assert_clean(store)
    code, record, err = run_json(*CPU_RUN, store=store, outputs=outputs)
    assert code == 0, err
    assert [s["action"] for s in record["steps"]] == ["cached", "cached", "run", "elided", "run"]


def test_a_crash_in_one_sweep_job_leaves_the_others_running(tmp_path: Path) -> None:
    store, sweep_dir = tmp_path / "store", tmp_path / "sweep"
    run = subprocess.Popen([sys.executable, "-m", "planner.cli.main", "run", "-m", *SWEEP, "-j", "1",
                            "--store", str(store), "--sweep-dir", str(sweep_dir), "--json"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    step_process(run, "export").send_signal(signal.SIGKILL)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 1, err
    jobs = json.loads(out)["jobs"]
    assert sorted(j["status"] for j in jobs) == ["failed", "ok"]
    failed = next(j for j in jobs if j["status"] == "failed")
    assert "step export (export) was killed by signal 9 (SIGKILL; out of memory?)" in \
        failed["error"]
    assert_clean(store)
