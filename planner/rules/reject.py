"""reject: a step whose requirements no rule can establish makes the config a contradiction,
reported with the config path that causes it and a fix."""

from __future__ import annotations

from typing import Any

from planner.core import facts as F
from planner.core.plan import Plan, Rewrite

NAME = "reject"
ORDER = 90


def apply(plan: Plan) -> list[Rewrite]:
    known = plan.facts()
    for s in plan.live():
        for req in F.unmet_requires(s.decl, s.params, plan.facts_by_role(s, known)):
            given = plan.input_facts(s, known, req.role)
            have = F.value_of(given, req.fact)
            where = _config_choice(plan.config, req.config_path)
            fix = req.fix or f"change {req.config_path or 'the config'}"
            premises = [{"fact": req.fact, "claim": f"{s.id} requires "
                         f"{F.describe_requirement(req, s.params)}", "by": s.id},
                        {"fact": req.fact, "claim": f"its input has {req.fact}={have}",
                         "by": given[req.fact].by if req.fact in given else None}]
            need = (req.need.format(**s.params) if req.need else
                    f"{s.id} requires {F.describe_requirement(req, s.params)}")
            return [Rewrite(NAME, "reject", s.id, premises,
                            f"{where}: {need}, but its input has {req.fact}={_show(have)}; "
                            f"{fix}")]
    return []


def _config_choice(config: dict[str, Any], path: str) -> str:
    node = config.get(path) if path else None
    if isinstance(node, dict) and "name" in node:
        return f"{path}={node['name']}"
    return path or "config"


def _show(value: Any) -> str:
    return "none" if value is None else str(value)
