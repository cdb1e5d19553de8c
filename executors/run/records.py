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

from planner.render import card

FORMAT_VERSION = 1


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"


def timestamp(epoch: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(epoch))


# Fields a step record has only when the outcome says (executors/run/outcome.py): `node`,
# where an executor with several machines ran it, {id, ip}; `started`, the epoch time a built
# step began, recorded as `start_s`, seconds after the run began; `worker`, the local warm
# worker process that built it.
OPTIONAL = {"node", "started", "worker"}


def step_record(step: dict[str, Any], key: str, **fields: Any) -> dict[str, Any]:
    """A step record with every required field; `fields` overrides the defaults."""
    rec = {"id": step["id"], "op": step["op"], "key": key, "action": step["action"],
           "planned_action": step["action"], "status": "ok", "wall_s": 0.0,
           "peak_rss_mb": 0.0, "outputs": {}, "digests": {}, "metrics": {},
           "proof_check": None, "error": None, "quarantined": None}
    unknown = set(fields) - set(rec) - OPTIONAL
    if unknown:
        raise KeyError(f"step record has no field(s) {sorted(unknown)}")
    rec.update(fields)
    if "memory" in step:  # the plan's estimate, beside what was measured
        rec["planned_peak_mb"] = round(step["memory"]["peak"] / 2**20, 1)
    return rec


def skipped(step: dict[str, Any], key: str, why: str = "an input step failed") -> dict[str, Any]:
    return step_record(step, key, status="skipped", error=why)


def interrupted(step: dict[str, Any], key: str, signal_name: str) -> dict[str, Any]:
    """The record of a step a signal stopped."""
    return step_record(step, key, status="interrupted",
                       error=f"interrupted by {signal_name}; its temporary output was removed")


def first_error(steps: list[dict[str, Any]]) -> dict[str, str] | None:
    """The run's error: the first step that failed or was interrupted (a skipped step only
    follows one of those)."""
    for s in steps:
        if s["status"] in ("failed", "interrupted"):
            return {"step": s["id"], "message": f"step {s['id']}: {s['error']}"
                    if s["status"] == "interrupted" else s["error"] or "failed"}
    return None


def lift_modules(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-module rows steps measured (metrics `modules`), moved to the record with the id
    of the step that measured them: one table for reports and diffs."""
    rows = []
    for s in steps:
        # a new dict: a sweep's jobs share the metrics of the steps they share
        metrics, s["metrics"] = s["metrics"], {k: v for k, v in s["metrics"].items()
                                               if k != "modules"}
        rows += [{"step": s["id"], **row} for row in metrics.get("modules") or []]
    return rows


def choices(config: dict[str, Any]) -> dict[str, str]:
    """The option each config group names (model, quant, target...): how reports name a run."""
    return {group: node["name"] for group, node in config.items()
            if isinstance(node, dict) and isinstance(node.get("name"), str)}


def run_record(ir: dict[str, Any], steps: list[dict[str, Any]], *, executor: str,
               store: Path, started: float, wall_s: float, overrides: list[str],
               deliverable: str, outputs_dir: Path | None, job: int | None = None,
               interrupted_by: str | None = None, say: Any = None) -> dict[str, Any]:
    """The record of one plan's run. `started` is an epoch time; `job` a sweep job's index;
    `interrupted_by` the signal that stopped it. A failed gate (verify, eval) adds where the
    accuracy went, per module (executors/run/gate_diagnosis.py)."""

    error = first_error(steps)
    modules = lift_modules(steps)
    for s in steps:  # a timeline: when each built step began, from the run's start
        if "started" in s:
            s["start_s"] = round(max(0.0, s.pop("started") - started), 3)
    record = {
        "format_version": FORMAT_VERSION, "run_id": new_run_id(),
        "status": "interrupted" if interrupted_by else "failed" if error else "ok",
        "started": timestamp(started),
        "wall_s": round(wall_s, 3), "executor": executor, "store": str(store),
        "config_digest": ir["config_digest"], "choices": choices(ir["config"]),
        "overrides": list(overrides),
        "deliverable": deliverable, "outputs_dir": str(outputs_dir) if outputs_dir else None,
        "steps": steps, "error": error, "modules": modules, "model": card.facts(ir),
    }
    if error and not interrupted_by:
        from executors.run.gate_diagnosis import record_fields  # onnx, only after a failure

        record.update(record_fields(ir, steps, say))
    if job is not None:
        record["job"] = job
    if interrupted_by:
        record["interrupted_by"] = interrupted_by
    return record
