"""metadata-order: a step that writes node metadata is placed after the last step on its
chain that drops node metadata, so the tags reach the deliverable."""

from __future__ import annotations

from planner.core.ops import Trait
from planner.core.plan import Plan, Rewrite

NAME = "metadata-order"
ORDER = 20


def apply(plan: Plan) -> list[Rewrite]:
    for s in plan.live():
        if not s.decl.has(Trait.WRITES_NODE_METADATA):
            continue
        droppers = [d for d in plan.chain_after(s.id) if d.decl.has(Trait.DROPS_NODE_METADATA)]
        if droppers:
            last = droppers[-1]
            premises = [
                {"fact": "tagged", "claim": f"{s.id} writes node metadata", "by": s.id},
                {"fact": "tagged", "claim": f"{last.id} runs after it and drops node metadata",
                 "by": last.id},
            ]
            return [Rewrite(NAME, "reorder", s.id, premises,
                            f"{s.id} moved after {last.id}, the last step that drops node "
                            "metadata, so its tags survive to the deliverable", anchor=last.id)]
    return []
