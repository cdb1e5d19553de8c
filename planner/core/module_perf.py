"""perf.module: the steps that benchmark one module alone.

`extract` cuts the subgraph of every module the name or tag path matches out of the graph the
deliverable is (or, for an EPContext deliverable, the graph it is compiled from), a compile
step compiles the pieces the same way when the deliverable is compiled, and a second perf
step times each piece alone. How many modules a class name matches is known only once the
model is exported, so one extract step yields one piece per match and the perf step one row
per piece.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.core.ops import FactName, Trait
from planner.core.plan import Step
from planner.errors import PlanError

EXTRACT, COMPILE, PERF = "extract", "compile_module", "perf_module"


def steps(config: dict[str, Any], lowered: list[Step], deliverable: str,
          sid: Callable[[str], str] = lambda op: op) -> list[Step]:
    """The steps perf.module adds after one graph's lowered chain (none when it is null);
    `sid` names a step in that graph's chain."""
    module = config["perf"]["module"]
    if not module:
        return []
    if config["perf"]["iterations"] < 1:
        raise PlanError(f"perf.module={module}: benchmarking a module needs perf.iterations "
                        "of 1 or more; use perf=quick, or unset perf.module")
    hierarchy = next((s for s in lowered if any(e.fact == FactName.HIERARCHY_MAP
                                                 for e in s.decl.ensures)), None)
    if hierarchy is None:
        raise PlanError(f"perf.module={module}: modules are found by the hierarchy tags of a "
                        f"torch export, and model={config['model']['name']} is not exported "
                        "from torch; unset perf.module (the whole-model perf still runs)")
    by_id = {s.id: s for s in lowered}
    final = by_id[deliverable]
    sealed = final.decl.has(Trait.ENCAPSULATES)
    graph = final.chain_input if sealed else final.id
    out = [Step(sid(EXTRACT), "extract", {"module": module},
                {"model": graph, "hierarchy": hierarchy.id})]
    if sealed:  # the pieces are compiled the way the deliverable was
        out.append(Step(sid(COMPILE), final.op, dict(final.params), {"model": sid(EXTRACT)}))
    perf = next(s for s in lowered if s.op == "perf")
    out.append(Step(sid(PERF), "perf", dict(perf.params), {"model": out[-1].id}))
    return out
