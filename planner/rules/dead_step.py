"""dead-step: a step whose output no sink (the deliverable, verify, perf) consumes is dropped."""

from __future__ import annotations

from planner.core.plan import Plan, Rewrite

NAME = "dead-step"
ORDER = 40


def apply(plan: Plan) -> list[Rewrite]:
    needed: set[str] = set()
    stack = plan.sinks()
    while stack:
        sid = stack.pop()
        if sid not in needed:
            needed.add(sid)
            stack.extend(plan.step(sid).inputs.values())
    for s in plan.steps:
        upstream = s.chain_input
        if s.action == "elided" and upstream in needed:
            continue  # kept to show its proof; it costs nothing
        if s.id not in needed:
            premises = [{"fact": "consumers", "claim": f"no sink reads {s.id}", "by": None}]
            return [Rewrite(NAME, "drop", s.id, premises,
                            f"{s.id} dropped: nothing the plan delivers depends on it")]
    return []
