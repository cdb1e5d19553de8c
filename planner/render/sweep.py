"""The merged sweep plan as text (`modelplan plan -m`)."""

from __future__ import annotations

from typing import Any

from planner.render.common import short, summary_line


def render(sweep: dict[str, Any]) -> str:
    s = sweep["summary"]
    lines = [f"modelplan plan -m: {s['jobs']} jobs", ""]
    for job in sweep["jobs"]:
        state = f"error: {job['error']}" if job["error"] else summary_line(job["plan"])
        lines.append(f"  job {job['index']}: {' '.join(job['overrides'])}")
        lines.append(f"    {state}")
    shared = [st for st in sweep["steps"] if len(st["jobs"]) > 1]
    if shared:
        lines += ["", "Shared steps (sweep-CSE: one step for every job that has its key):"]
        lines += [f"  {st['id']:<10} {short(st['key'])}  {st['action']:<6}  jobs "
                  f"{', '.join(map(str, st['jobs']))}" for st in shared]
    lines += ["", (f"Sweep plan: {s['jobs']} jobs, {s['total_steps']} steps, "
                   f"{s['unique_steps']} unique ({s['run']} to run, {s['cached']} cached, "
                   f"{s['elided']} elided), {s['shared_steps']} shared, "
                   f"{s['failed_jobs']} job(s) with config errors.")]
    return "\n".join(lines) + "\n"
