"""What runs inside Ray's worker processes: one unique step (through the one step wrapper and
the shared store), and the probe every node answers before a run starts.

These are plain functions; the driver wraps them with `ray.remote(...).options(...)` per step,
so each step asks for its own resources (planner/core/resources.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from executors.run import stepdag
from executors.run.wrapper import execute_step
from executors.runtime.adapters import available_eps
from executors.store.content import Store


def node_identity() -> dict[str, str]:
    import ray

    return {"id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address()}


def run_step(store_root: str, step: dict[str, Any], key: str, out_dir: str | None,
             step_retries: int, roles: list[str], *inputs: dict[str, Any]) -> dict[str, Any]:
    """One unique step of a DAG. `inputs` are the outcomes of the steps it reads, in `roles`
    order; Ray hands them over once those tasks are done (the DAG's edges are Ray's)."""
    by_role = dict(zip(roles, inputs, strict=True))
    where = Path(out_dir) if out_dir else None
    return _retried(lambda: stepdag.unique_step(Store(Path(store_root)), step, key, by_role,
                                              where), step_retries)


def build_step(store_root: str, step: dict[str, Any], key: str, inputs: dict[str, str],
               out_dir: str | None, step_retries: int) -> dict[str, Any]:
    """Build one step from its inputs' directories (a run that re-keys step by step)."""
    paths = {r: Path(p) for r, p in inputs.items()}
    where = Path(out_dir) if out_dir else None
    return _retried(lambda: execute_step(Store(Path(store_root)), step, key, paths, where,
                                         lambda _m: None, quiet=True), step_retries)


def _retried(attempt: Callable[[], dict[str, Any]], step_retries: int) -> dict[str, Any]:
    """Run a step again while it fails for its own reason, at most `step_retries` times."""
    for tries in range(1, step_retries + 2):
        outcome = attempt()
        if outcome["status"] != "failed":
            break
    if outcome["status"] == "failed" and tries > 1:
        outcome["error"] += f" (failed {tries} times: executor.step_retries={step_retries})"
    return {**outcome, "node": node_identity()}


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
