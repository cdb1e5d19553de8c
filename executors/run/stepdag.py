"""The merged DAG every executor runs: unique keys, what each key depends on, measurements last,
and the outcome of one unique step given the outcomes of its inputs.

A sweep (or one plan) is `unique`: key -> {step (the IR of its first use), jobs using it}.
An outcome is the dict `execute_step` returns (status, action, path, outputs, digests, ...),
or a skipped / elided / unelided outcome made here. The local executor's pool and the Ray
executor's tasks both build from these, so they schedule the same graph the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from executors.run.wrapper import execute_step, premises_hold
from executors.store.content import Store
from planner.core.ops import OPS, Trait
from planner.errors import PlanError

Unique = dict[str, dict[str, Any]]
Deps = dict[str, dict[str, str]]      # key -> role -> key of the step that input names


def single(ir: dict[str, Any]) -> tuple[Unique, dict[int, dict[str, str]]]:
    """One plan as a merged DAG of one job (job 0): its unique keys and id -> key map."""
    unique: Unique = {}
    for s in ir["steps"]:
        unique.setdefault(s["key"], {"step": s, "jobs": [0]})
    return unique, {0: {s["id"]: s["key"] for s in ir["steps"]}}


def dependencies(unique: Unique, ids: dict[int, dict[str, str]]) -> Deps:
    """role -> key of the step each input names, within the job the step came from."""
    return {k: {role: ids[v["jobs"][0]][src] for role, src in v["step"]["inputs"].items()}
            for k, v in unique.items()}


def measures(step: dict[str, Any]) -> bool:
    """A step that measures this machine: it runs alone, after everything else is built."""
    return OPS[step["op"]].has(Trait.NOT_CACHEABLE)


def widest_first(unique: Unique, key: str) -> tuple[int, str]:
    return (len(unique[key]["jobs"]) * -1, key)  # widely shared steps first


def longest_path_first(unique: Unique, deps: Deps) -> Callable[[str], tuple[int, int, str]]:
    """A sort key for ready steps: the longest chain of builds still to come after the step
    first (the critical path), then the widest shared, then by key. Measurements do not
    count: they run last, on their own."""
    consumers: dict[str, list[str]] = {k: [] for k in unique}
    for key, inputs in deps.items():
        for dep in set(inputs.values()):
            consumers[dep].append(key)
    length: dict[str, int] = {}

    def remaining(key: str) -> int:
        if key not in length:
            step = unique[key]["step"]
            own = int(step["action"] == "run" and not measures(step))
            length[key] = own + max((remaining(c) for c in consumers[key]), default=0)
        return length[key]

    for key in topological(unique, deps)[::-1]:  # sinks first: no deep recursion
        remaining(key)
    return lambda key: (-length[key], *widest_first(unique, key))


def topological(unique: Unique, deps: Deps) -> list[str]:
    """Every key after the keys it depends on; measurements last; shared steps first."""
    done: list[str] = []
    placed: set[str] = set()
    pending = sorted(unique, key=lambda k: (measures(unique[k]["step"]), widest_first(unique, k)))
    while pending:
        ready = [k for k in pending if all(d in placed for d in deps[k].values())]
        if not ready:
            raise PlanError("the merged DAG has a cycle or a missing input; this is a "
                            "modelplan bug: report the overrides that planned it")
        done.extend(ready)
        placed.update(ready)
        pending = [k for k in pending if k not in placed]
    builds = [k for k in done if not measures(unique[k]["step"])]
    return builds + [k for k in done if measures(unique[k]["step"])]


SKIPPED = {"status": "skipped", "action": "run", "error": "an input step failed"}


def input_failed(dep_keys: dict[str, str], outcomes: dict[str, dict[str, Any]]) -> bool:
    return any(d in outcomes and outcomes[d]["status"] != "ok" for d in dep_keys.values())


def elided(step: dict[str, Any], inputs: dict[str, str]) -> dict[str, Any]:
    """An elided step's outcome: its input stands for it if the premises hold on it, else
    `unelided` (the job then runs on its own, re-keying what follows)."""
    role = OPS[step["op"]].chain_role
    held, detail = premises_hold(step, Path(inputs[role]), step["inputs"][role])
    if held:
        return {"status": "ok", "action": "elided", "path": inputs[role],
                "proof_check": {"held": True, "detail": detail}}
    return {"status": "unelided", "action": "run", "error": detail}


def unique_step(store: Store, step: dict[str, Any], key: str,
                inputs: dict[str, dict[str, Any]], out_dir: Path | None,
                say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """The outcome of one unique step, given its inputs' outcomes by role."""
    if any(r["status"] != "ok" for r in inputs.values()):
        return dict(SKIPPED)
    paths = {role: r["path"] for role, r in inputs.items()}
    if step["action"] == "elided":
        return elided(step, paths)
    return execute_step(store, step, key, {r: Path(p) for r, p in paths.items()}, out_dir, say,
                        quiet=True)
