"""Facts: what holds of an artifact, who established it, and how ops change it.

A fact is `value` (equal to compare), `flag` (true when established) or `set` (holds
when it contains what is asked: `fused ⊇ {gelu}`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.core.ops import Derived, Ensure, FactName, Op, Param, Require, Trait

N = FactName
KINDS: dict[FactName, str] = {
    N.FORMAT: "value", N.SOURCE_DIGEST: "value", N.TASK: "value", N.MODEL_CLASS: "value",
    N.OPSET: "value", N.IO_SPECS: "flag", N.HIERARCHY_MAP: "flag", N.NORMALIZED: "flag",
    N.FUSED: "set", N.LEGAL_FOR: "value", N.PRECISION: "value", N.TAGGED: "flag",
    N.COMPILED: "value",
}

# What an op's traits destroy in its input's facts.
KILLED_BY: dict[Trait, tuple[FactName, ...]] = {
    Trait.DROPS_NODE_METADATA: (N.TAGGED,),
    Trait.FOLDS_CONSTANTS: (N.LEGAL_FOR,),
    Trait.CHANGES_OPSET: (N.OPSET,),
    Trait.ENCAPSULATES: (N.TAGGED,),  # tags stay on the QDQ graph the context was built from
    Trait.CUTS_GRAPH: (N.IO_SPECS,),    # its inputs are the cut's boundary, not the export's
}


@dataclass(frozen=True)
class Fact:
    value: Any
    by: str  # id of the step that established it


Facts = dict[str, Fact]


def resolve_value(value: Any, params: dict[str, Any]) -> Any:
    if isinstance(value, Param):
        return params[value.name]
    if isinstance(value, Derived):
        return value.fn(params)
    return value


def ensured_holds(facts: Facts, ensure: Ensure, params: dict[str, Any]) -> bool:
    """Does `ensure` already hold on `facts`?"""
    want = resolve_value(ensure.value, params)
    have = facts.get(ensure.fact)
    kind = KINDS[ensure.fact]
    if kind == "set":
        return set(want) <= set(have.value if have else ())
    if have is None:
        return False
    if kind == "flag":
        return bool(have.value)
    return have.value == want


def requirement_holds(facts: Facts, req: Require, params: dict[str, Any]) -> bool:
    have = facts.get(req.fact)
    want = resolve_value(req.value, params)
    if req.test == "present":
        return have is not None and bool(have.value)
    if req.test == "eq":
        return have is not None and have.value == want
    if req.test == "not_in":
        value = have.value if have is not None else _default(req.fact)
        return value not in want
    raise ValueError(f"unknown requirement test {req.test!r}")


def unmet_requires(op: Op, params: dict[str, Any],
                   facts_by_role: dict[str, Facts]) -> list[Require]:
    """The op's requirements that the facts of its inputs (by input role; a missing role has
    none) do not meet, in the order the op declares them."""
    return [req for req in op.requires
            if not requirement_holds(facts_by_role.get(req.role, {}), req, params)]


def _default(fact: str) -> Any:
    # Every model is fp32 until an op says otherwise.
    return {"precision": "fp32"}.get(fact)


def value_of(facts: Facts, fact: str) -> Any:
    have = facts.get(fact)
    return have.value if have is not None else _default(fact)


def apply(facts: Facts, op: Op, params: dict[str, Any], step_id: str) -> Facts:
    """Facts of the op's output, given the facts of its chain input."""
    if op.has(Trait.SINK):
        return {}
    out = dict(facts)
    for trait, killed in KILLED_BY.items():
        if op.has(trait):
            for name in killed:
                out.pop(name, None)
    for ensure in op.ensures:
        want = resolve_value(ensure.value, params)
        if KINDS[ensure.fact] == "set":
            have = out.get(ensure.fact)
            merged = sorted(set(want) | set(have.value if have else ()))
            out[ensure.fact] = Fact(merged, step_id if not have or merged != have.value else have.by)
        else:
            out[ensure.fact] = Fact(want, step_id)
    return out


def to_json(facts: Facts) -> dict[str, Any]:
    return {name: {"value": f.value, "by": f.by} for name, f in sorted(facts.items())}


def describe_ensure(ensure: Ensure, params: dict[str, Any]) -> str:
    want = resolve_value(ensure.value, params)
    kind = KINDS[ensure.fact]
    if kind == "set":
        return f"{ensure.fact} ⊇ {{{', '.join(want)}}}"
    if kind == "flag":
        return ensure.fact
    return f"{ensure.fact}={want}"


def describe_requirement(req: Require, params: dict[str, Any]) -> str:
    want = resolve_value(req.value, params)
    if req.test == "present":
        return req.fact
    if req.test == "eq":
        return f"{req.fact}={want}"
    return f"{req.fact} not in {{{', '.join(map(str, want))}}}"
