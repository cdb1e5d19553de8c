"""Rewrite rules (docs/architecture.md §3). One rule = one module here, found by discovery.

A rule module defines NAME, ORDER (lower runs first), optionally SWITCH (the key under
`planner.rules` that turns it off) and SCOPE ("plan", default, or "sweep"), and
`apply(plan) -> list[Rewrite]`. The engine applies rules until none fires.

A rule reads what rule_inputs() freezes, and nothing else of the plan: a sweep replays the
rewrites of one lowered plan on every other with equal rule inputs. A rule that needs more
(another param, the weights) adds it there.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, replace
from functools import cache
from string import Formatter
from types import ModuleType
from typing import Any

from planner.core.ops import OPS, Derived, Param
from planner.core.plan import Plan, Rewrite, Step
from planner.errors import InternalError, PlanError
from planner.support import memo

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


@dataclass(frozen=True)
class Shape:
    """What the rules made of a lowered plan: its rewrites, and its steps as they left them
    (id, the step if a rule inserted it, inputs, via, action, proof, inserted_by, moved_by),
    to give every lowered plan with equal rule inputs in one pass."""

    rewrites: tuple[Rewrite, ...]
    steps: tuple[tuple[Any, ...], ...]
    deliverable: str

    @staticmethod
    def of(plan: Plan, rewrites: list[Rewrite], lowered: set[str]) -> Shape:
        return Shape(tuple(rewrites), tuple(
            (s.id, None if s.id in lowered else _fresh(s), dict(s.inputs), dict(s.via),
             s.action, s.proof, s.inserted_by, s.moved_by) for s in plan.steps),
            plan.deliverable)

    def give(self, plan: Plan) -> None:
        """Shape `plan` (lowered, with equal rule inputs) as the rules shaped the first."""
        lowered = {s.id: s for s in plan.steps}
        steps = []
        for sid, inserted, inputs, via, action, proof, inserted_by, moved_by in self.steps:
            s = lowered[sid] if inserted is None else _fresh(inserted)
            s.inputs, s.via, s.action = dict(inputs), dict(via), action
            s.proof, s.inserted_by, s.moved_by = proof, inserted_by, moved_by
            steps.append(s)
        plan.steps[:] = steps
        plan.deliverable = self.deliverable
        plan.rewrites.extend(self.rewrites)


def rewrite(plan: Plan, switches: dict[str, Any]) -> None:
    """Apply the enabled rules to a fixed point, recording every rewrite in the plan.
    In a memo session, a lowered plan whose rule inputs (rule_inputs) equal an earlier one's
    is given that plan's shape (Shape): the rules, reading the same, would do the same."""
    rules = enabled(switches)
    if not memo.active():
        _fixed_point(plan, rules)
        return

    here: list[bool] = []

    def on_this_plan() -> Shape:
        here.append(True)
        lowered = {s.id for s in plan.steps}
        return Shape.of(plan, _fixed_point(plan, rules), lowered)

    plan.rewritten_from = rule_inputs(plan, rules)
    shape = memo.remembered("rewrites", plan.rewritten_from, on_this_plan)
    if not here:
        shape.give(plan)


def _fresh(step: Step | None) -> Step | None:
    """A copy of a step about to be inserted (the plan then rewires it), its params shared:
    no rule or later stage changes a step's params."""
    return None if step is None else replace(step, inputs=dict(step.inputs), via=dict(step.via))


def rule_inputs(plan: Plan, rules: list[ModuleType]) -> bytes:
    """All that the rules read of a lowered plan, frozen: the rules, the deliverable, each
    step's id, op, inputs, action and param names, the values of the params its op's facts
    and requirement messages are made of (all of them where a fact is derived by a function),
    and the config's choice for each requirement's config path (a rejection names it)."""
    steps = []
    for s in plan.steps:
        read = _read_params(s.op)
        steps.append([s.id, s.op, s.inputs, s.action, sorted(s.params),
                      s.params if read is None else {k: s.params[k] for k in read
                                                     if k in s.params},
                      {r.config_path: _choice(plan.config, r.config_path)
                       for r in s.decl.requires if r.config_path}])
    return memo.frozen([[r.NAME for r in rules], plan.deliverable, steps])


@cache
def _read_params(op: str) -> tuple[str, ...] | None:
    """The params an op's declared facts and requirement messages read (None: all)."""
    decl = OPS[op]
    values = [r.value for r in decl.requires] + [e.value for e in decl.ensures + decl.prepares]
    if any(isinstance(v, Derived) for v in values):
        return None
    names = {v.name for v in values if isinstance(v, Param)}
    names |= {f for r in decl.requires for _, f, _, _ in Formatter().parse(r.need) if f}
    return tuple(sorted(names))


def _choice(config: dict[str, Any], path: str) -> Any:
    node = config.get(path)
    return node.get("name") if isinstance(node, dict) else None


def _fixed_point(plan: Plan, rules: list[ModuleType]) -> list[Rewrite]:
    """Apply the rules until none fires; the rewrites, each with its new step as it was
    before the plan took it (for a replay)."""
    done: list[Rewrite] = []
    for _ in range(MAX_ROUNDS):
        for rule in rules:
            rewrites = rule.apply(plan)
            if rewrites:
                for rw in rewrites:
                    done.append(replace(rw, new_step=_fresh(rw.new_step)))
                    APPLY[rw.action](plan, rw)
                    plan.rewrites.append(rw)
                break
        else:
            return done
    raise InternalError(f"the rewrite rules did not reach a fixed point in {MAX_ROUNDS} rounds; "
                        "this is a modelplan bug: report it with the config that "
                        "`modelplan config` prints (with the same overrides), and set planner.rules.elide=false to plan without elision meanwhile")
