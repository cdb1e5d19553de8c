"""Config -> Plan: compose, validate, lower, rewrite to a fixed point, key, mark actions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from planner import rules
from planner.config.compose import compose_timed
from planner.config.conftree import PACKAGED, ConfigTree
from planner.config.validate import check_config
from planner.core import module_perf
from planner.core.keys import assign_keys
from planner.core.lower import lower
from planner.core.ops import Trait
from planner.core.plan import Plan
from planner.core.storelayout import entry_complete, store_root


def plan_from_overrides(overrides: list[str] | tuple[str, ...] = (),
                        store: str | None = None, tree: ConfigTree = PACKAGED,
                        symbolic: bool = False, timings: dict[str, float] | None = None) -> Plan:
    """The plan for the tree's primary config with Hydra overrides (and an optional store)."""
    return plan_for(compose_timed(overrides, store=store, tree=tree, timings=timings),
                    symbolic=symbolic, timings=timings)


def plan_for(config: dict[str, Any], symbolic: bool = False,
             timings: dict[str, float] | None = None) -> Plan:
    """The plan for an already composed config. symbolic: a model source that cannot be read
    here gets a symbolic key, and the plan says so (it can be reviewed, not run). timings:
    where planning's time goes (`plan_s`), if given."""
    t0 = time.perf_counter()
    check_config(config)
    plan = lower(config, symbolic)
    rules.rewrite(plan, config["planner"]["rules"])
    assign_keys(plan)
    module_perf.check_known_modules(plan, store_root(config))
    mark_actions(plan, store_root(config))
    if timings is not None:
        timings["plan_s"] = time.perf_counter() - t0
    return plan


def mark_actions(plan: Plan, root: Path) -> None:
    for s in plan.steps:
        if s.action == "elided":
            s.reason = (s.proof or {}).get("conclusion", "")
        elif s.decl.has(Trait.NOT_CACHEABLE):
            s.action, s.reason = "run", "not cacheable: it measures this machine"
        elif entry_complete(root, s.key):
            s.action, s.reason = "cached", "output already in the store"
        else:
            s.action, s.reason = "run", "output not in the store"
