"""Rewrite rules (docs/architecture.md §3). One rule = one module here, found by discovery.

A rule module defines NAME, ORDER (lower runs first), optionally SWITCH (the key under
`planner.rules` that turns it off) and SCOPE ("plan", default, or "sweep"), and
`apply(plan) -> list[Rewrite]`. The engine applies rules until none fires.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from types import ModuleType
from typing import Any

from planner.core.plan import Plan, Rewrite
from planner.errors import InternalError, PlanError

MAX_ROUNDS = 100


@cache
def discover(scope: str = "plan") -> tuple[ModuleType, ...]:
    mods = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
    return tuple(sorted((m for m in mods if getattr(m, "SCOPE", "plan") == scope),
                        key=lambda m: m.ORDER))


def observed_on_input(rule: str) -> bool:
    """Whether an elision by `rule` rests on facts of the elided step's input, which an executor
    re-observes there (a rule may set OBSERVED_ON_INPUT = False when its premises are about the
    step's readers instead: they are observed on the readers' outputs)."""
    module = next((r for r in discover() if r.NAME == rule), None)
    return getattr(module, "OBSERVED_ON_INPUT", True)


def enabled(switches: dict[str, Any]) -> list[ModuleType]:
    return [r for r in discover() if switches.get(getattr(r, "SWITCH", ""), True)]


def _reject(plan: Plan, rw: Rewrite) -> None:
    raise PlanError(rw.conclusion)


APPLY = {"elide": Plan.elide, "insert": Plan.insert_after, "reorder": Plan.move_after,
         "drop": Plan.drop, "reject": _reject}


def rewrite(plan: Plan, switches: dict[str, Any]) -> None:
    """Apply the enabled rules to a fixed point, recording every rewrite in the plan."""
    rules = enabled(switches)
    for _ in range(MAX_ROUNDS):
        for rule in rules:
            rewrites = rule.apply(plan)
            if rewrites:
                for rw in rewrites:
                    APPLY[rw.action](plan, rw)
                    plan.rewrites.append(rw)
                break
        else:
            return
    raise InternalError(f"the rewrite rules did not reach a fixed point in {MAX_ROUNDS} rounds; "
                        "this is a modelplan bug: report it with the config that "
                        "`modelplan config` prints (with the same overrides), and set planner.rules.elide=false to plan without elision meanwhile")
