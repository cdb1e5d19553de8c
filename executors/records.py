"""Run records (schemas/run.schema.json): one builder for every executor and every mode.

A step record says what happened to one step (its key, action, status, wall time, peak
memory, outputs and metrics); a run record wraps the step records of one plan with the run's
identity, timing, executor and outcome.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"


def timestamp(epoch: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(epoch))


def step_record(step: dict[str, Any], key: str, **fields: Any) -> dict[str, Any]:
    """A step record with every required field; `fields` overrides the defaults."""
    rec = {"id": step["id"], "op": step["op"], "key": key, "action": step["action"],
           "planned_action": step["action"], "status": "ok", "wall_s": 0.0,
           "peak_rss_mb": 0.0, "outputs": {}, "digests": {}, "metrics": {},
           "proof_check": None, "error": None, "quarantined": None}
    unknown = set(fields) - set(rec)
    if unknown:
        raise KeyError(f"step record has no field(s) {sorted(unknown)}")
    rec.update(fields)
    return rec


def skipped(step: dict[str, Any], key: str) -> dict[str, Any]:
    return step_record(step, key, status="skipped", error="an input step failed")


def first_error(steps: list[dict[str, Any]]) -> dict[str, str] | None:
    """The run's error: the first step that failed (a skipped step only follows a failure)."""
    for s in steps:
        if s["status"] == "failed":
            return {"step": s["id"], "message": s["error"] or "failed"}
    return None


def run_record(ir: dict[str, Any], steps: list[dict[str, Any]], *, executor: str,
               store: Path, started: float, wall_s: float, overrides: list[str],
               deliverable: str, outputs_dir: Path | None,
               job: int | None = None) -> dict[str, Any]:
    """The record of one plan's run. `started` is an epoch time; `job` a sweep job's index."""
    error = first_error(steps)
    record = {
        "format_version": FORMAT_VERSION, "run_id": new_run_id(),
        "status": "failed" if error else "ok", "started": timestamp(started),
        "wall_s": round(wall_s, 3), "executor": executor, "store": str(store),
        "config_digest": ir["config_digest"], "overrides": list(overrides),
        "deliverable": deliverable, "outputs_dir": str(outputs_dir) if outputs_dir else None,
        "steps": steps, "error": error,
    }
    if job is not None:
        record["job"] = job
    return record
