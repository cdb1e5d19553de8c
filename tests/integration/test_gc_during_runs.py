"""`modelplan store gc` while a run is active: the entries the run holds (cached ones it is
about to read, and the one it is building) survive; everything else can go."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psutil

from planner.core.storelayout import entry_complete
from tests.conftest import run_cli
from tests.integration.conftest import CPU_RUN, run_json, step, store_copy
from tests.integration.processes import assert_clean, start, step_process

QUANTIZED = ("model=tiny_bert", "quant=w8a8", "target=cpu", "verify=cosine", "verify.samples=2",
             "perf=none")


def test_gc_keeps_what_a_running_run_holds(cpu_run: dict[str, Any], tmp_path: Path) -> None:
    store = store_copy(cpu_run, tmp_path / "store")  # gc removes entries: a store of its own
    shared = cpu_run["record"]
    code, other, err = run_json(*CPU_RUN, "export.shapes.sequence_length=16", store=store,
                                outputs=tmp_path / "b")
    assert code == 0, err
    run = start(*QUANTIZED, store=store, outputs=tmp_path / "c")
    step_process(run, "quantize")  # mid-build; verify will read normalize's entry after it
    # held still while gc runs: a tiny quantize and verify can end before gc has started
    held = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
    for proc in held:
        proc.send_signal(signal.SIGSTOP)
    try:
        gc = run_cli("store", "gc", "--keep-runs", "0", "--store", str(store))
    finally:
        for proc in held:
            proc.send_signal(signal.SIGCONT)
    assert gc.returncode == 0, gc.stderr
    assert "held by 1 running run(s)" in gc.stdout
    for held in ("resolve", "export", "normalize"):  # cached for the run: kept
        assert entry_complete(store, step(shared, held)["key"]), held
    for gone in ("export", "normalize", "tag"):  # nobody holds these
        assert not entry_complete(store, step(other, gone)["key"]), gone
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err
    record = json.loads(out)
    assert [step(record, s)["action"] for s in ("resolve", "export", "normalize")] == \
        ["cached"] * 3
    assert step(record, "quantize")["action"] == "run" and step(record, "verify")["status"] == "ok"
    assert run_cli("store", "verify", "--store", str(store)).returncode == 0
    assert_clean(store)
