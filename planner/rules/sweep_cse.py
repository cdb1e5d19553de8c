"""sweep-CSE: across the jobs of a multirun, steps with equal keys are one step. Equal keys
mean equal op, op version, params, input keys and tool versions, so equal outputs."""

from __future__ import annotations

from typing import Any

from planner.core.plan import Rewrite

NAME = "sweep-CSE"
ORDER = 10
SCOPE = "sweep"


def apply(sweep: Any) -> list[Rewrite]:
    merges = []
    for key, entry in sweep.uses.items():
        jobs = entry["jobs"]
        if len(jobs) < 2:
            continue
        step_id = entry["step"].id
        premises = [{"fact": "key", "claim": f"{step_id} has key {key[:12]} in jobs "
                     f"{', '.join(map(str, jobs))}", "by": None}]
        merges.append(Rewrite(NAME, "merge", step_id, premises,
                              f"{step_id} runs once for {len(jobs)} jobs: an equal key means "
                              "equal op, params, inputs and tool versions"))
    return merges
