"""`modelplan run` as a process for tests that send it (or its steps) real signals."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import ROOT


def start(*args: str, store: Path, outputs: Path | None = None) -> subprocess.Popen[str]:
    """`modelplan run ARGS --store STORE [--outputs OUTPUTS] --json`, started."""
    extra = ["--outputs", str(outputs)] if outputs is not None else []
    return subprocess.Popen([sys.executable, "-m", "planner.cli.main", "run", *args, "--store",
                             str(store), *extra, "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def step_process(run: subprocess.Popen[str], step_id: str, timeout: float = 300) -> psutil.Process:
    """The process running step `step_id` (named `mp:<step id>`) of `run`, once it exists."""
    deadline = time.time() + timeout
    while time.time() < deadline and run.poll() is None:
        for p in psutil.Process(run.pid).children(recursive=True):
            try:
                if p.name() == f"mp:{step_id}"[:15]:
                    return p
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.02)
    run.kill()
    raise AssertionError(f"no process for step {step_id} within {timeout} s")


def assert_clean(store: Path) -> None:
    """No temporary build output and no entry without its manifest is left in the store."""
    assert list((store / "tmp").iterdir()) == []
    assert all((e / "manifest.json").is_file() for e in store.glob("??/*"))
