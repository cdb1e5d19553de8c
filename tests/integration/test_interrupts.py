"""Ctrl-C and SIGTERM stop a real `modelplan run` cleanly; a second Ctrl-C exits at once."""

from __future__ import annotations

import fcntl
import json
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import run_cli
from tests.integration.conftest import CPU_RUN, run_json, step
from tests.integration.processes import assert_clean, start, step_process


def unlocked(store: Path) -> bool:
    """Every key lock of the store is free."""
    for lock in (store / "locks").glob("*.lock"):
        with lock.open("a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(fh, fcntl.LOCK_UN)
    return True


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_stops_cleanly_and_says_so(sig: signal.Signals, code: int,
                                                      tmp_path: Path) -> None:
    store, outputs = tmp_path / "store", tmp_path / "out"
    run = start(*CPU_RUN, store=store, outputs=outputs)
    worker = step_process(run, "export")
    run.send_signal(sig)
    out, err = run.communicate(timeout=60)
    assert run.returncode == code, err
    assert f"step export: interrupted by {sig.name}; its temporary output was removed" in err
    assert "Traceback" not in err
    record = json.loads(out)
    assert record["status"] == "interrupted" and record["interrupted_by"] == sig.name
    assert step(record, "resolve")["status"] == "ok"
    assert step(record, "export")["status"] == "interrupted"
    assert {step(record, s)["status"] for s in ("normalize", "optimize", "tag")} == {"skipped"}
    # a first run: its record is kept beside the folder it did not make, not as a result
    assert [p.name for p in outputs.iterdir()] == ["tiny_bert-none-cpu.run.failed.json"]
    saved = json.loads((outputs / "tiny_bert-none-cpu.run.failed.json").read_text())
    assert saved["run_id"] == record["run_id"]
    assert (store / "runs" / f"{record['run_id']}.json").is_file()
    assert not psutil.pid_exists(worker.pid) or worker.status() == psutil.STATUS_ZOMBIE
    assert_clean(store)
    assert unlocked(store) and list((store / "leases").iterdir()) == []
    code, again, err = run_json(*CPU_RUN, store=store, outputs=outputs)
    assert code == 0, err
    assert step(again, "resolve")["action"] == "cached" and step(again, "export")["action"] == "run"


def test_a_second_ctrl_c_exits_at_once_without_a_half_entry(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = start(*CPU_RUN, store=store, outputs=tmp_path / "out")
    worker = step_process(run, "export")
    run.send_signal(signal.SIGINT)
    run.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, err = run.communicate(timeout=60)
    assert time.monotonic() - t0 < 5 and run.returncode == 130, err
    assert "Traceback" not in err
    worker.wait(timeout=10)  # the step's process did not outlive the run
    assert all((e / "manifest.json").is_file() for e in store.glob("??/*"))  # no half entry
    gc = run_cli("store", "gc", "--store", str(store))  # what a hard exit leaves is stale
    assert gc.returncode == 0, gc.stderr
    assert_clean(store)
