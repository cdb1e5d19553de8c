"""Config -> Plan: compose, validate, lower, rewrite to a fixed point, key, mark actions; and a
sweep's plan: every job planned, then the sweep rules merge them."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

from planner import rules
from planner.config.compose import compose_timed
from planner.config.conftree import PACKAGED, ConfigTree
from planner.config.validate import check_config
from planner.core import memory, module_perf
from planner.core.keys import assign_keys
from planner.core.lower import lower
from planner.core.ops import Trait
from planner.core.plan import Plan
from planner.core.storelayout import entry_complete, store_root
from planner.core.sweep import Composer, Job, SweepPlan, expand
from planner.core.targets import of_config
from planner.errors import ModelplanError
from planner.support import memo
from planner.support.heap import collector_paused
from planner.support.units import human_bytes


def plan_from_overrides(overrides: list[str] | tuple[str, ...] = (),
                        store: str | None = None, tree: ConfigTree = PACKAGED,
                        symbolic: bool = False, timings: dict[str, float] | None = None) -> Plan:
    """The plan for the tree's primary config with Hydra overrides (and an optional store)."""
    return plan_for(compose_timed(overrides, store=store, tree=tree, timings=timings),
                    symbolic=symbolic, timings=timings)


def plan_for(config: dict[str, Any], symbolic: bool = False,
             timings: dict[str, float] | None = None) -> Plan:
    """The plan for an already composed config. symbolic: a model source that cannot be read
    here gets a symbolic key, and the plan says so (it can be reviewed, not run). timings:
    where planning's time goes (`plan_s`), if given."""
    t0 = time.perf_counter()
    check_config(config)
    plan = _estimated(config, symbolic)
    memory.check(plan, partial(_parts_that_fit, config, symbolic, memory.parts(plan)))
    if timings is not None:
        timings["plan_s"] = time.perf_counter() - t0
    return plan


def _estimated(config: dict[str, Any], symbolic: bool) -> Plan:
    """Lowered, rewritten, keyed, its actions marked and its memory estimated."""
    plan = lower(config, symbolic)
    rules.rewrite(plan, config["planner"]["rules"])
    assign_keys(plan)
    module_perf.check_known_modules(plan, store_root(config))
    mark_actions(plan, store_root(config))
    memory.estimate(plan)
    return plan


# export.parts tried for a language model over the memory limit (its compile steps each hold
# one part, and a graph in parts shares no context binary)
PARTS_TRIED = (2, 4, 8, 16, 32)


def _parts_that_fit(config: dict[str, Any], symbolic: bool, now: int, cap: int) -> list[str]:
    """The fewest export.parts (of PARTS_TRIED, more than the `now` planned) whose plan fits
    `cap`, as a setting that names the peak it plans; else the fewest that fit once the checks
    over `cap` are left out (parts do not lower a check that loads the whole deliverable beside
    PyTorch's model), with the overrides that leave them out. None for a model export.parts
    cannot cut, or on a target that does not compile (there parts change the deliverable's
    layout and hold no less memory)."""
    import copy

    if not of_config(config["target"]).compiles:
        return []
    without_checks: list[str] = []
    for count in (n for n in PARTS_TRIED if n > now):
        tried = copy.deepcopy(config)
        tried["export"]["parts"] = count
        try:
            plan = _estimated(tried, symbolic)
        except Exception:  # noqa: BLE001 - not a language model, fewer layers than parts:
            return without_checks  # no other suggestion, and the refusal as it is
        if plan.memory and plan.memory["peak"] <= cap:
            return [f"export.parts={count} (its peak ~{human_bytes(plan.memory['peak'])})"]
        without_checks = without_checks or _parts_without_checks(plan, count, cap)
    return without_checks


def _parts_without_checks(plan: Plan, count: int, cap: int) -> list[str]:
    """`export.parts=count` with the overrides that leave out the checks over `cap`, if every
    step over it is such a check (the setting names the peak left)."""
    left = memory.checks_over(plan, cap)
    if left is None:
        return []
    drops, peak = left
    return [f"export.parts={count} {' '.join(drops)} (its peak ~{human_bytes(peak)})"]


def mark_actions(plan: Plan, root: Path) -> None:
    for s in plan.steps:
        if s.action == "elided":
            s.reason = (s.proof or {}).get("conclusion", "")
        elif s.decl.has(Trait.NOT_CACHEABLE):
            s.action, s.reason = "run", "not cacheable: it measures this machine"
        elif memo.remembered("entry", (root, s.key), partial(entry_complete, root, s.key)):
            s.action, s.reason = "cached", "output already in the store"
        else:
            s.action, s.reason = "run", "output not in the store"


def plan_sweep(overrides: list[str], store: str | None = None, tree: ConfigTree = PACKAGED,
               symbolic: bool = False, timings: dict[str, float] | None = None,
               incremental: bool = True) -> SweepPlan:
    """Plan every job of a multirun; a job whose config is invalid fails alone."""
    return plan_jobs(expand(overrides), store, tree=tree, symbolic=symbolic, timings=timings,
                     incremental=incremental)


def plan_jobs(job_overrides: list[list[str]], store: str | None = None,
              first_index: int = 0, tree: ConfigTree = PACKAGED,
              symbolic: bool = False, timings: dict[str, float] | None = None,
              incremental: bool = True) -> SweepPlan:
    """Plan already expanded jobs (as a Hydra sweeper hands them to a launcher).
    symbolic: a model source that cannot be read gets a symbolic key (planner.models.sources).
    timings: where planning's time goes (`plan_s`, and `composes`: configs Hydra composed).
    incremental: work that jobs share (a config section's checks, a source's digest, the
    rewrites of an equal lowered plan...) is done once (planner/support/memo.py); False plans
    every job from scratch, as a single plan is made (the same sweep plan, slower)."""
    if not incremental:
        return _plan_jobs(job_overrides, store, first_index, tree, symbolic, timings)
    with memo.session(), collector_paused():
        return _plan_jobs(job_overrides, store, first_index, tree, symbolic, timings)


def _plan_jobs(job_overrides: list[list[str]], store: str | None, first_index: int,
               tree: ConfigTree, symbolic: bool,
               timings: dict[str, float] | None) -> SweepPlan:
    composer = Composer(tree)
    jobs = [Job(first_index + i, list(ov)) for i, ov in enumerate(job_overrides)]
    store_path = str(Path(store).expanduser().resolve()) if store else None
    for job in jobs:
        try:
            config = composer(job.overrides)
            if store_path:
                config["store"]["path"] = store_path
            job.plan = plan_for(config, symbolic=symbolic, timings=timings)
        except ModelplanError as exc:
            job.error = "; ".join(exc.lines)
    sweep = SweepPlan(jobs)
    for rule in rules.discover("sweep"):
        sweep.merges.extend(rule.apply(sweep))
    if timings is not None:
        timings["composes"] = composer.composes
    return sweep
