"""Content keys (docs/architecture.md §4): sha256 over op, op version, params, input keys and
tool versions."""

from __future__ import annotations

import hashlib
import json
from functools import cache, partial
from typing import Any

from planner.core.ops import OPS
from planner.core.plan import Plan, Step
from planner.models.sources import canonical_json
from planner.support.dists import installed, normalize
from planner.support.memo import active, frozen, remembered

NOT_INSTALLED = "not-installed"


_normalize = normalize


@cache
def installed_versions() -> dict[str, str]:
    """Installed distributions by normalized name (planner/support/dists.py), read once."""
    return installed()


def tool_version(dist: str) -> str:
    return installed_versions().get(_normalize(dist), NOT_INSTALLED)


def tool_versions(names: tuple[str, ...] | list[str]) -> dict[str, str]:
    return {n: tool_version(n) for n in sorted(set(names))}


def content_key(op: str, params: dict[str, Any], input_keys: dict[str, str],
                tools: dict[str, str]) -> str:
    decl = OPS[op]
    keyed = {k: v for k, v in params.items() if k not in decl.unkeyed}
    payload = {"op": op, "op_version": decl.version, "params": keyed,
               "inputs": dict(sorted(input_keys.items())),
               "tools": {t: tools[t] for t in sorted(decl.tools_for(params))}}
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def step_key(step: Step, keys: dict[str, str], tools: dict[str, str]) -> str:
    """The step's content key; in a memo session, once per op, params and input keys (the
    tools' versions are this process's)."""
    inputs = {r: keys[src] for r, src in step.inputs.items()}
    return remembered("key", frozen((step.op, step.params, inputs)),
                      lambda: content_key(step.op, step.params, inputs, tools))


def assign_keys(plan: Plan) -> None:
    """Key every step in run order; record the tool versions the keys used."""
    plan.tools = tool_versions([t for s in plan.steps for t in s.decl.tools_for(s.params)])
    keys: dict[str, str] = {}
    for s in plan.steps:
        s.key = keys[s.id] = step_key(s, keys, plan.tools)


def config_digest(config: dict[str, Any]) -> str:
    """sha256 of the config's canonical JSON; in a memo session that JSON is put together
    from each section's, made once per content (the same bytes)."""
    if not active():
        return hashlib.sha256(canonical_json(config)).hexdigest()
    sections = [_member(k) + remembered("canonical", frozen(v), partial(_canonical_text, v))
                for k, v in sorted(config.items())]
    return hashlib.sha256(("{" + ",".join(sections) + "}").encode()).hexdigest()


@cache
def _member(key: str) -> str:
    return json.dumps(key, ensure_ascii=False) + ":"


def _canonical_text(value: Any) -> str:
    return canonical_json(value).decode()
