"""Sweeps: expand Hydra multirun overrides into jobs, compose each distinct group selection
once (value overrides are applied on top, as Hydra applies them after composition), and the
sweep's plan: every job's plan, merged into one DAG in which equal keys are one step
(sweep-CSE). planner/planning.py plans the jobs and runs the sweep rules."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from planner.config.compose import GROUPS, check_overrides, compose_config, yaml_error, yaml_mark
from planner.config.conftree import PACKAGED, PRIMARY, ConfigTree
from planner.config.overrides import first_line, parse_overrides
from planner.core.plan import ACTIONS, Plan, Rewrite
from planner.errors import ConfigError
from planner.support.memo import copied


def expand(overrides: list[str]) -> list[list[str]]:
    """The jobs of a multirun: the cartesian product of every sweep (`a=x,y`, range(), ...)."""
    choices: dict[str, list[str]] = {}
    for ov in parse_overrides(overrides):
        key = ov.get_key_element()
        if ov.is_sweep_override():
            if not ov.is_discrete_sweep():
                raise ConfigError(f"{key}: only discrete sweeps (a,b,c / range() / choice()) "
                                  "can be expanded; list the values")
            choices[key] = [f"{key}={v}" for v in ov.sweep_string_iterator()]
            if not choices[key]:
                raise ConfigError(f"{ov.input_line}: this sweep has no values, so there are no "
                                  "jobs; give at least one value")
        else:
            choices[key] = [f"{key}={ov.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*choices.values())]


class Composer:
    """compose() for many jobs. A group selection is composed once: when every chosen group
    file is plain (no defaults list, no @package, no interpolation) and the primary config is
    the packaged one, it is the base config with those files in place of their groups, which
    is what Hydra's defaults list does; otherwise Hydra composes it. Value overrides are then
    merged into a copy of the resolved tree as OmegaConf.update(merge=True) would (a value
    with an interpolation goes through OmegaConf). tests/unit/test_sweep_plan.py checks the
    result equals a full compose, with and without a user config dir."""

    def __init__(self, tree: ConfigTree = PACKAGED) -> None:
        self.tree = tree
        self.cache: dict[tuple[str, ...], dict[str, Any]] = {}
        self.checked: dict[str, list[str]] = {}  # each override's findings, by its text
        self.composes = 0

    def __call__(self, overrides: list[str]) -> dict[str, Any]:
        from planner.config.unread import settle_chosen

        config = self._compose_job(overrides)
        settle_chosen(config, overrides)
        if not self.tree.packaged_only:
            from planner.config.provenance import check_with_files

            check_with_files(config, self.tree, overrides)
        return config

    def _compose_job(self, overrides: list[str]) -> dict[str, Any]:
        parsed = parse_overrides(overrides)
        check_overrides(parsed, self.tree, self.checked)
        structural = tuple(o.input_line for o in parsed if _structural(o))
        values = [o for o in parsed if not _structural(o)]
        if any("${" in str(ov.value()) for ov in values):
            return self._through_omegaconf(structural, values)
        if structural not in self.cache:
            self.cache[structural] = self._compose(structural, parsed)
        out = copied(self.cache[structural])
        for ov in values:
            _merge_at(out, ov.key_or_group.split("."), ov.value())
        return out

    def _compose(self, structural: tuple[str, ...], parsed: list[Any]) -> dict[str, Any]:
        picks = {o.key_or_group: o.value() for o in parsed if _structural(o)}
        files = {k: self.tree.find(f"{k}/{v}.yaml") if k in GROUPS and isinstance(v, str)
                 else None for k, v in picks.items()}
        if structural and self.tree.config_name == PRIMARY and \
                all(f is not None and _plain_group_file(f) for f in files.values()):
            if () not in self.cache:
                self.cache[()] = self._compose((), [])
            tree = copy.deepcopy(self.cache[()])
            for group, path in files.items():
                assert path is not None
                tree[group] = copy.deepcopy(_group_tree(path, self.tree))
            return tree
        from omegaconf import OmegaConf

        self.composes += 1
        return _to_dict(OmegaConf, compose_config(list(structural), self.tree))

    def _through_omegaconf(self, structural: tuple[str, ...], values: list[Any]) -> dict:
        from omegaconf import OmegaConf

        cfg = compose_config(list(structural), self.tree)
        self.composes += 1
        try:
            for ov in values:
                OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=True)
        except Exception as exc:
            raise ConfigError(f"config: {first_line(exc)}") from exc
        return _to_dict(OmegaConf, cfg)


@cache
def _plain_group_file(path: Path) -> bool:
    text = path.read_text()
    return "defaults:" not in text and "@package" not in text and "${" not in text


@cache
def _group_tree(path: Path, tree: ConfigTree) -> dict[str, Any]:
    from omegaconf import OmegaConf

    try:
        return _to_dict(OmegaConf, OmegaConf.load(path))
    except ConfigError:
        raise
    except Exception as exc:  # a YAML syntax error in the file
        raise ConfigError(yaml_error(exc, tree) if yaml_mark(exc) else
                          f"{tree.display(path)}: {first_line(exc)}") from exc


def _to_dict(omegaconf: Any, cfg: Any) -> dict[str, Any]:
    try:
        return omegaconf.to_container(cfg, resolve=True, throw_on_missing=False)
    except Exception as exc:
        raise ConfigError(f"config: {first_line(exc)}") from exc


def _merge_at(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            raise ConfigError(f"{'.'.join(path)}: cannot set a key below "
                              f"'{part}', which is not a mapping")
        node = node[part]
    leaf = path[-1]
    if leaf not in node:
        raise ConfigError(f"{'.'.join(path)}: unknown key; see `modelplan config`")
    if isinstance(node[leaf], dict) and isinstance(value, dict):
        _merge_dicts(node[leaf], value)
    else:
        node[leaf] = copy.deepcopy(value)


def _merge_dicts(into: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(into.get(k), dict) and isinstance(v, dict):
            _merge_dicts(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


def _structural(ov: Any) -> bool:
    """Group choices and adds/deletes change what is composed; plain values do not."""
    return (ov.key_or_group in GROUPS or ov.is_add() or ov.is_delete() or ov.is_force_add()
            or ov.key_or_group.startswith("hydra"))


@dataclass
class Job:
    index: int
    overrides: list[str]
    plan: Plan | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.index}"

    @cached_property
    def ir(self) -> dict[str, Any] | None:
        """The job's Plan IR, rendered once (a planned job does not change)."""
        return self.plan.to_json() if self.plan is not None else None

    @property
    def outline(self) -> dict[str, Any] | None:
        """What a sweep's text view shows of the job's plan: its summary, symbolic sources."""
        if self.plan is None:
            return None
        symbolic = {"symbolic_sources": self.plan.symbolic_sources} \
            if self.plan.symbolic_sources else {}
        return {"summary": self.plan.summary(), **symbolic}


@dataclass
class SweepPlan:
    jobs: list[Job]
    merges: list[Rewrite] = field(default_factory=list)

    @cached_property
    def uses(self) -> dict[str, dict[str, Any]]:
        """key -> {step (its first use that runs, else its first use), job (that use's),
        jobs using it}: each key once. A step one job elides and another runs is run: an
        absorbed elision's output is not its input (its readers read past it), so the jobs
        that read it need it built."""
        out: dict[str, dict[str, Any]] = {}
        for job in self.jobs:
            for s in job.plan.steps if job.plan is not None else []:
                entry = out.get(s.key)
                if entry is None:
                    out[s.key] = entry = {"step": s, "job": job, "jobs": []}
                entry["jobs"].append(job.index)
                if entry["step"].action == "elided" and s.action != "elided":
                    entry["step"], entry["job"] = s, job
        return out

    @cached_property
    def unique(self) -> dict[str, dict[str, Any]]:
        """`uses` with each step as its job's Plan IR gives it (what executors run)."""
        ir_steps: dict[int, dict[str, dict[str, Any]]] = {}
        out: dict[str, dict[str, Any]] = {}
        for key, entry in self.uses.items():
            job = entry["job"]
            if job.index not in ir_steps:
                ir_steps[job.index] = {st["id"]: st for st in job.ir["steps"]}
            out[key] = {"step": ir_steps[job.index][entry["step"].id], "jobs": entry["jobs"]}
        return out

    def to_json(self, whole_plans: bool = True) -> dict[str, Any]:
        """The sweep's JSON. whole_plans=False: each job's plan holds only what the text view
        shows of it (its summary and symbolic sources), not its whole Plan IR."""
        steps = [{"key": k, "id": v["step"].id, "op": v["step"].op,
                  "action": v["step"].action, "jobs": v["jobs"]} for k, v in self.uses.items()]
        total = sum(len(j.plan.steps) for j in self.jobs if j.plan is not None)
        return {
            "format_version": 1,
            "jobs": [{"index": j.index, "overrides": j.overrides, "error": j.error,
                      "plan": j.ir if whole_plans else j.outline} for j in self.jobs],
            "steps": steps,
            "rewrites": [rw.record() for rw in self.merges],
            "summary": {"jobs": len(self.jobs), "failed_jobs": sum(j.error is not None
                                                                   for j in self.jobs),
                        "total_steps": total, "unique_steps": len(steps),
                        **{a: sum(s["action"] == a for s in steps)
                           for a in ACTIONS},
                        "shared_steps": sum(len(s["jobs"]) > 1 for s in steps)},
        }
