"""Saved plans: validate against plan.schema.json and the op declarations, recompute every
key, refuse mismatches. Executors run only plans that pass `check_plan`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import schemas
from planner.errors import PlanFileError
from planner.keys import config_digest, step_key, tool_versions
from planner.ops import OPS


def load_plan(path: Path) -> dict[str, Any]:
    try:
        ir = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PlanFileError(f"{path}: cannot read it ({exc.strerror}); "
                            "write one with `modelplan plan -o plan.json`") from exc
    except ValueError as exc:
        raise PlanFileError(f"{path}: not JSON ({exc}); "
                            "write one with `modelplan plan -o plan.json`") from exc
    check_plan(ir, str(path))
    return ir


def check_plan(ir: Any, where: str, tools: str = "here") -> None:
    """Schema-valid, one id per step, a real deliverable, config digest intact, every key
    recomputed and equal. tools: "here" (keys with this machine's tool versions: the plan can
    run here) or "plan" (keys with the versions the plan records: it was not edited)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schemas.load("plan"))
    errors = sorted(validator.iter_errors(ir), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        at = "/".join(str(p) for p in e.absolute_path) or "<root>"
        raise PlanFileError(f"{where}: not a valid plan at {at}: {e.message}; "
                            "re-plan with `modelplan plan -o FILE`")
    for s in ir["steps"]:
        _check_against_declaration(s, where)
    if tools == "here" and ir.get("symbolic_sources"):
        raise PlanFileError(f"{where}: planned with symbolic source keys "
                            f"({ir['symbolic_sources'][0]['reason']}), for review only; plan "
                            "where the checkpoint can be read, without --symbolic-sources")
    ids = [s["id"] for s in ir["steps"]]
    if len(set(ids)) != len(ids):
        raise PlanFileError(f"{where}: step ids repeat ({sorted({i for i in ids if ids.count(i) > 1})}); "
                            "re-plan with `modelplan plan -o FILE`")
    if ir["deliverable"] not in ids:
        raise PlanFileError(f"{where}: deliverable {ir['deliverable']!r} is not a step of the "
                            "plan; re-plan with `modelplan plan -o FILE`")
    if config_digest(ir["config"]) != ir["config_digest"]:
        raise PlanFileError(f"{where}: the embedded config does not match config_digest "
                            "(edited by hand?); re-plan with `modelplan plan -o FILE`")
    here = tool_versions([t for s in ir["steps"] for t in OPS[s["op"]].tools])
    if tools == "plan":
        here = {t: ir["tools"].get(t, v) for t, v in here.items()}
    drift = {t: (v, here[t]) for t, v in ir["tools"].items() if here.get(t) != v}
    keys: dict[str, str] = {}
    for s in ir["steps"]:
        unknown = [src for src in s["inputs"].values() if src not in keys]
        if unknown:
            raise PlanFileError(f"{where}: step {s['id']} reads {unknown} before they are "
                                "produced; re-plan")
        keys[s["id"]] = step_key(_StepView(s), keys, here)
        if keys[s["id"]] != s["key"]:
            why = ("tool versions differ: " + ", ".join(f"{t} {a} in the plan, {b} here"
                                                         for t, (a, b) in drift.items())
                   if drift else "its op, params or inputs were changed after planning")
            raise PlanFileError(f"{where}: step {s['id']} key does not match its content "
                                f"({why}); re-plan on this machine with `modelplan plan -o FILE`")


def _check_against_declaration(s: dict[str, Any], where: str) -> None:
    """A step names a declared op and carries exactly the params and input roles it declares."""
    op = OPS.get(s["op"])
    if op is None:
        raise PlanFileError(f"{where}: step {s['id']} names op {s['op']!r}, which this version "
                            f"does not know ({', '.join(OPS)}); re-plan with this version")
    for what, have, want in (("params", set(s["params"]), set(op.params)),
                             ("input roles", set(s["inputs"]), set(op.inputs))):
        if have != want:
            raise PlanFileError(
                f"{where}: step {s['id']} ({op.name}) has {what} {sorted(have)}, but {op.name} "
                f"declares {sorted(want)}; re-plan with `modelplan plan -o FILE`")


class _StepView:
    """The fields of a Plan IR step that keys read."""

    def __init__(self, s: dict[str, Any]) -> None:
        self.op, self.params, self.inputs = s["op"], s["params"], s["inputs"]
