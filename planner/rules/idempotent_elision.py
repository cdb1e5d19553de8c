"""idempotent-elision: an idempotent step whose ensured facts already hold on its input is
the identity there, so it is elided and its consumers read its input."""

from __future__ import annotations

from planner.core import facts as F
from planner.core.ops import Trait
from planner.core.plan import Plan, Rewrite, Step

NAME = "idempotent-elision"
ORDER = 10
SWITCH = "elide"


def apply(plan: Plan) -> list[Rewrite]:
    known = plan.facts()
    for s in plan.live():
        if not s.decl.has(Trait.IDEMPOTENT) or s.chain_input is None or not s.decl.ensures:
            continue
        given = plan.input_facts(s, known)
        if all(F.ensured_holds(given, e, s.params) for e in s.decl.ensures):
            return [_elision(s, given)]
    return []


def _elision(s: Step, given: F.Facts) -> Rewrite:
    premises = [_premise(e, s, given) for e in s.decl.ensures]
    return Rewrite(NAME, "elide", s.id, premises,
                   f"{label(s)} is idempotent and everything it ensures already holds on its "
                   f"input (from {s.chain_input}); elided, its consumers read {s.chain_input}")


def label(s: Step) -> str:
    if s.op == s.id and "flags" in s.params:
        return f"{s.op}{{{', '.join(s.params['flags'])}}}"
    return s.id


def _premise(e: F.Ensure, s: Step, given: F.Facts) -> dict:
    claim = F.describe_ensure(e, s.params)
    if e.fact not in given:  # an empty set requirement holds without anyone establishing it
        return {"fact": e.fact, "claim": f"{claim} holds trivially", "by": None}
    return {"fact": e.fact, "claim": f"{claim} holds on {s.id}'s input", "by": given[e.fact].by}
