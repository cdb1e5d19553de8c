"""What runs inside Ray's worker processes: one step (through the one step wrapper and the
shared store), and the probe every node answers before a run starts.

These are plain functions; the driver wraps them with `ray.remote(...).options(...)` per step,
so each step asks for its own resources (planner/core/resources.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from executors.run import forkserver
from executors.run.outcome import FAILED, StepOutcome
from executors.run.wrapper import check_elision, execute_step
from executors.runtime.adapters import available_eps
from executors.store.content import Store


def node_identity() -> dict[str, str]:
    import ray

    return {"id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address()}


def build_step(store_root: str, step: dict[str, Any], key: str, inputs: dict[str, str],
               out_dir: str | None, step_retries: int) -> StepOutcome:
    """One step, from its inputs' directories, through the step wrapper; a heavy step in a
    fresh child process of this worker (an elided step: its premises re-checked here)."""
    paths = {r: Path(p) for r, p in inputs.items()}
    if step["action"] == "elided":
        return _retried(lambda: check_elision(step, paths), 0)
    where = Path(out_dir) if out_dir else None
    store = Store(Path(store_root), writable=False)  # the driver and every node's probe checked
    return _retried(lambda: execute_step(store, step, key, paths, where,
                                         lambda _m: None, forkserver.apply_in_child,
                                         quiet=True), step_retries)


def _retried(attempt: Callable[[], StepOutcome], step_retries: int) -> StepOutcome:
    """Run a step again while it fails for its own reason, at most `step_retries` times."""
    for tries in range(1, step_retries + 2):
        outcome = attempt()
        if outcome.status != FAILED:
            break
    if outcome.status == FAILED and tries > 1:
        outcome.error = f"{outcome.error} (failed {tries} times: executor.step_retries=" \
            f"{step_retries})"
    outcome.node = node_identity()
    return outcome


def probe(store_root: str, token: str) -> dict[str, Any]:
    """This node's view: does it see the probe file the driver wrote into the store, can it
    write beside it, which execution providers it has."""
    sees, writable, detail = store_is_visible(Path(store_root), token)
    return {"node": node_identity(), "sees": sees, "writable": writable, "detail": detail,
            "eps": sorted(available_eps())}


def store_is_visible(root: Path, token: str) -> tuple[bool, bool, str]:
    """Whether this machine sees the probe file holding `token`, and can write beside it."""
    probe_file = root / "tmp" / f"probe-{token}"
    try:
        if probe_file.read_text() != token:
            return False, False, f"{probe_file} holds something else"
    except OSError as exc:
        return False, False, f"{probe_file}: {exc.strerror or exc}"
    mine = root / "tmp" / f"probe-{token}.{os.getpid()}"
    try:
        mine.write_text(token)
        mine.unlink()
    except OSError as exc:
        return True, False, f"cannot write {root / 'tmp'}: {exc.strerror or exc}"
    return True, True, "ok"
