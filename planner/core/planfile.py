"""Saved plans: validate against plan.schema.json and the op declarations, recompute every
key, refuse mismatches. Executors run only plans that pass `check_plan`.

A plan to apply may come from someone else (a pull request), so `load_plan` also refuses what
no plan needs: an oversized or deeply nested file, a path outside the roots the user allows
(the store, the outputs directory, `--allow-path`), remote code unless `--trust-remote-code`,
and any step that is not exactly what the plan's own config plans on this machine (so a plan
cannot smuggle in parameters, such as provider options, that its config would not allow).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import schemas
from planner.core.keys import config_digest, step_key, tool_versions
from planner.core.ops import OPS
from planner.errors import ModelplanError, PlanFileError

MAX_BYTES = 4 << 20   # plans of the packaged models are 10-30 KB
MAX_DEPTH = 32        # plans nest about 8 levels deep
REPLAN = "re-plan with `modelplan plan -o plan.json` (and the overrides you planned with)"


@dataclass(frozen=True)
class Trust:
    """What applying a plan may touch: paths under `roots` only; `store`, the store the user
    chose (None: the plan's, if it is under a root); remote code only if the user said so."""

    roots: tuple[Path, ...]
    store: Path | None = None
    trust_remote_code: bool = False


def load_plan(path: Path, trust: Trust | None = None) -> dict[str, Any]:
    """A saved plan, checked (and with `trust`, checked as one from someone else)."""
    ir = read_plan_json(Path(path))
    check_plan(ir, str(path))
    if trust is not None:
        check_trusted(ir, str(path), trust)
        check_derivation(ir, str(path), trust.store)
    return ir


def read_plan_json(path: Path) -> Any:
    """A plan file's JSON; an oversized or too deeply nested file is refused unread."""
    fix = "write one with `modelplan plan -o plan.json`"
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise PlanFileError(f"{path}: {size} bytes, more than a plan can be "
                                f"({MAX_BYTES >> 20} MB); {fix}")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanFileError(f"{path}: cannot read it ({exc.strerror or exc}); {fix}") from exc
    except UnicodeDecodeError as exc:
        raise PlanFileError(f"{path}: not UTF-8 text; {fix}") from exc
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise PlanFileError(f"{path}: JSON nested {depth} levels deep, more than a plan ever is "
                            f"({MAX_DEPTH}); {fix}")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PlanFileError(f"{path}: not JSON ({exc}); {fix}") from exc


def nesting_depth(text: str) -> int:
    """How deeply JSON text nests arrays and objects (brackets inside strings do not count)."""
    depth = deepest = 0
    for bracket in re.findall(r"[\[\]{}]", re.sub(r'"(?:[^"\\]|\\.)*"', "", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


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
                            + REPLAN)
    for s in ir["steps"]:
        _check_against_declaration(s, where)
    if tools == "here" and ir.get("symbolic_sources"):
        raise PlanFileError(f"{where}: planned with symbolic source keys "
                            f"({ir['symbolic_sources'][0]['reason']}), for review only; plan "
                            "where the checkpoint can be read, without --symbolic-sources")
    ids = [s["id"] for s in ir["steps"]]
    if len(set(ids)) != len(ids):
        raise PlanFileError(f"{where}: step ids repeat ({sorted({i for i in ids if ids.count(i) > 1})}); "
                            + REPLAN)
    if ir["deliverable"] not in ids:
        raise PlanFileError(f"{where}: deliverable {ir['deliverable']!r} is not a step of the "
                            "plan; " + REPLAN)
    if config_digest(ir["config"]) != ir["config_digest"]:
        raise PlanFileError(f"{where}: the embedded config does not match config_digest "
                            "(edited by hand?); " + REPLAN)
    here = tool_versions([t for s in ir["steps"] for t in OPS[s["op"]].tools_for(s["params"])])
    if tools == "plan":
        here = {t: ir["tools"].get(t, v) for t, v in here.items()}
    drift = {t: (v, here[t]) for t, v in ir["tools"].items() if t in here and here[t] != v}
    unused = sorted(set(ir["tools"]) - set(here))  # keyed by a version that used them
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
                   if drift else f"its keys hold {', '.join(unused)}, which its steps do not "
                   "use in this version" if unused
                   else "its op, params or inputs were changed after planning")
            raise PlanFileError(f"{where}: step {s['id']} key does not match its content "
                                f"({why}); on this machine, {REPLAN}")


def _check_against_declaration(s: dict[str, Any], where: str) -> None:
    """A step names a declared op and carries exactly the params and input roles it declares."""
    op = OPS.get(s["op"])
    if op is None:
        raise PlanFileError(f"{where}: step {s['id']} names op {s['op']!r}, which this version "
                            f"does not know ({', '.join(OPS)}); re-plan with this version")
    for what, have, want in (("params", set(s["params"]), set(op.params)),
                             ("input roles", set(s["inputs"]), set(op.inputs))):
        if not want - set(op.optional) <= have <= want:
            raise PlanFileError(
                f"{where}: step {s['id']} ({op.name}) has {what} {sorted(have)}, but {op.name} "
                f"declares {sorted(want)}; " + REPLAN)


class _StepView:
    """The fields of a Plan IR step that keys read."""

    def __init__(self, s: dict[str, Any]) -> None:
        self.op, self.params, self.inputs = s["op"], s["params"], s["inputs"]


def check_trusted(ir: dict[str, Any], where: str, trust: Trust) -> None:
    """Paths inside the allowed roots; remote code only when the user trusts it."""
    config = ir["config"]
    paths = [("model.path", config["model"].get("path")),
             ("eval.dataset.path", (config.get("eval") or {}).get("dataset", {}).get("path"))]
    if trust.store is None:  # the plan's own store would be used
        paths.append(("store.path", config["store"].get("path")))
    # every path a step reads: the params its op declares as locating content (`unkeyed`)
    paths += [(f"step {s['id']} {name}", s["params"].get(name)) for s in ir["steps"]
              if s["op"] in OPS for name in OPS[s["op"]].unkeyed]
    shown = ", ".join(str(r) for r in trust.roots)
    for what, value in paths:
        if isinstance(value, str) and _names_a_path(value) and not _under(value, trust.roots):
            raise PlanFileError(
                f"{where}: {what} {value[:200]} is outside the paths this run may use ({shown}); "
                f"if you trust it, pass --allow-path DIR" + (" or --store DIR"
                                                            if what == "store.path" else ""))
    remote = config["model"].get("trust_remote_code") or any(
        s["params"].get("trust_remote_code") for s in ir["steps"])
    if remote and not trust.trust_remote_code:
        raise PlanFileError(f"{where}: the plan sets trust_remote_code: true, which runs the "
                            "checkpoint's own Python code; pass --trust-remote-code to apply it "
                            "only if you trust that checkpoint")


def _names_a_path(value: str) -> bool:
    """Whether a value names a file or folder (a hub dataset id such as `glue` does not: it is
    read from the local cache, resolved to a path at plan time)."""
    return value.startswith(("/", "~", ".")) or Path(value).expanduser().exists()


def _under(value: str, roots: tuple[Path, ...]) -> bool:
    try:
        path = Path(value).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return any(path.is_relative_to(root.resolve()) for root in roots)


def check_derivation(ir: dict[str, Any], where: str, store: Path | None) -> None:
    """Every step is exactly what the plan's embedded config plans here (op, params, inputs,
    elision), so a plan runs nothing its config would not."""
    from planner.planning import plan_for

    config = copy.deepcopy(ir["config"])
    if store is not None:
        config["store"]["path"] = str(store)
    try:
        again = plan_for(config).to_json()
    except ModelplanError as exc:
        raise PlanFileError(f"{where}: its config does not plan on this machine "
                            f"({exc.lines[0]}); {REPLAN}") from exc
    ours = {s["id"]: s for s in again["steps"]}
    for s in ir["steps"]:
        differs = _difference(s, ours.get(s["id"]))
        if differs:
            raise PlanFileError(f"{where}: step {s['id']} is not what the plan's config plans "
                                f"here ({differs}); a saved plan runs only as its config "
                                f"plans it: {REPLAN}")
    if len(ours) != len(ir["steps"]) or again["deliverable"] != ir["deliverable"]:
        raise PlanFileError(f"{where}: its steps are not the ones its config plans here "
                            f"({', '.join(ours)}); {REPLAN}")


def _difference(theirs: dict[str, Any], ours: dict[str, Any] | None) -> str:
    if ours is None:
        return "its config plans no such step"
    for field in ("op", "inputs", "via", "memory"):
        if theirs.get(field) != ours.get(field):
            return f"{field} differs"
    for name in sorted(set(theirs["params"]) | set(ours["params"])):
        if theirs["params"].get(name) != ours["params"].get(name):
            return f"params.{name} differs"
    if (theirs["action"] == "elided") != (ours["action"] == "elided"):
        return "marked elided" if theirs["action"] == "elided" else "its elision removed"
    return ""
