"""absorbed-elision: an idempotent step whose every consumer first establishes, on its own
input, all that the step ensures (Op.prepares) changes nothing those consumers deliver, so it
is elided and they read its input. optimize{flags} normalizes its input before fusing, so the
normalize step before it is redundant: the fixed point it reaches is the one optimize reaches.
"""

from __future__ import annotations

from planner.core import facts as F
from planner.core.ops import Trait
from planner.core.plan import Plan, Rewrite, Step
from planner.rules.idempotent_elision import label

NAME = "absorbed-elision"
ORDER = 25  # after metadata-order: tag must not sit between the step and its reader
SWITCH = "elide"
OBSERVED_ON_INPUT = False  # the premises are the readers' declarations; their outputs are observed


def apply(plan: Plan) -> list[Rewrite]:
    known = plan.facts()
    for s in plan.live():
        if (not s.decl.has(Trait.IDEMPOTENT) or s.chain_input is None or not s.decl.ensures
                or s.id == plan.deliverable):
            continue
        readers = [c for c in plan.live() if s.id in c.inputs.values()]
        if readers and all(_absorbs(plan, c, s, known) for c in readers):
            return [_elision(s, readers)]
    return []


def _absorbs(plan: Plan, c: Step, s: Step, known: dict[str, F.Facts]) -> bool:
    """`c` reads `s` only as its chain input, prepares all `s` ensures, and its requirements
    hold on the input of `s`."""
    if [role for role, src in c.inputs.items() if src == s.id] != [c.decl.chain_role]:
        return False
    prepared = {e.fact: F.Fact(F.resolve_value(e.value, c.params), c.id) for e in c.decl.prepares}
    if not all(F.ensured_holds(prepared, e, s.params) for e in s.decl.ensures):
        return False
    given = {**plan.facts_by_role(s, known), c.decl.chain_role: plan.input_facts(s, known)}
    return not F.unmet_requires(c.decl, c.params, given)


def _elision(s: Step, readers: list[Step]) -> Rewrite:
    names = ", ".join(label(c) for c in readers)
    premises = [{"fact": e.fact, "claim": f"{names} establishes "
                 f"{F.describe_ensure(e, s.params)} on its own input before transforming it",
                 "by": c.id} for c in readers for e in s.decl.ensures]
    return Rewrite(NAME, "elide", s.id, premises,
                   f"{s.id} is idempotent and {names} first brings its input to what {s.id} "
                   f"ensures, by the same transformation; elided, {names} reads "
                   f"{s.chain_input}")
