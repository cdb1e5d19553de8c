"""Plan builders for rule tests: the lowered plan before any rule, and synthetic edits."""

from __future__ import annotations

from planner.config.compose import compose
from planner.core.lower import lower
from planner.core.plan import Plan, Step


def lowered(*overrides: str, store: str | None = None) -> Plan:
    config = compose(list(overrides))
    if store:
        config["store"]["path"] = store
    return lower(config)


def append_after(plan: Plan, anchor: str, step: Step) -> Step:
    """Insert `step` right after `anchor` in the chain, as a config could have asked for."""
    for s in plan.live():
        if s.id != step.id and s.chain_input == anchor:
            s.inputs[s.decl.chain_role] = step.id
    step.inputs[step.decl.chain_role] = anchor
    if plan.deliverable == anchor:
        plan.deliverable = step.id
    plan.steps.insert(plan.steps.index(plan.step(anchor)) + 1, step)
    return step
