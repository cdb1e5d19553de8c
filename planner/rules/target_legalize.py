"""target-legalize: a step that requires the model to be legal for its target (e.g. compile
for QNN HTP) gets the legalizing op inserted after the last step that can undo legality."""

from __future__ import annotations

from planner.core import facts as F
from planner.core.ops import OPS, Op, Param, Trait
from planner.core.plan import Plan, Rewrite, Step

NAME = "target-legalize"
ORDER = 30
FACT = "legal_for"


def provider() -> Op:
    """The op that establishes legality, found by what it ensures."""
    return next(o for o in OPS.values() if any(e.fact == FACT for e in o.ensures))


def apply(plan: Plan) -> list[Rewrite]:
    known = plan.facts()
    for s in plan.live():
        for req in F.unmet_requires(s.decl, s.params, plan.facts_by_role(s, known)):
            if req.fact == FACT:
                return [_insertion(plan, s, F.resolve_value(req.value, s.params), known)]
    return []


def _killers() -> set[Trait]:
    return {t for t, killed in F.KILLED_BY.items() if FACT in killed}


def _insertion(plan: Plan, s: Step, target: str, known: dict[str, F.Facts]) -> Rewrite:
    op = provider()
    upstream = plan.chain_before(s.id)
    anchor = next((u for u in upstream if u.decl.traits & _killers()), None)
    if anchor is None:  # nothing undoes legality: legalize as soon as the model is ONNX
        anchor = next(u for u in reversed(upstream) if F.value_of(known[u.id], "format") == "onnx")
    param = next(e.value.name for e in op.ensures if e.fact == FACT and isinstance(e.value, Param))
    new = Step(plan.new_id(op.name, near=anchor.id), op.name, {param: target})
    premises = [
        {"fact": FACT, "claim": f"{s.id} requires {FACT}={target}", "by": s.id},
        {"fact": FACT, "claim": f"{FACT}={target} does not hold on {s.id}'s input", "by": None},
        {"fact": FACT, "claim": f"{anchor.id} is the last step before it that can undo legality",
         "by": anchor.id},
    ]
    return Rewrite(NAME, "insert", new.id, premises,
                   f"{op.name}{{target={target}}} inserted after {anchor.id}: without it "
                   f"{s.id} fails or loses accuracy on {target} (e.g. -inf mask constants "
                   "stretch a quantized range until every score rounds to one value; HTP "
                   "graph finalization rejects them and the mask Where)", anchor=anchor.id, new_step=new)
