"""Run a plan or a sweep on the executor its config names: the one path the CLI, the Hydra app
(`modelplan-job`) and the Hydra launcher share.

Executors are plugins found by name in the `modelplan.executors` entry-point group, the way
Hydra finds launchers; nothing under planner/ imports them. An executor class provides:

    name: str
    __init__(store_root: Path, options: dict, quiet: bool, debug: bool)
    run(ir, outputs_dir: Path | None, overrides: list[str]) -> run record
    run_sweep(sweep: SweepPlan, sweep_dir: Path) -> sweep summary
    add_commands(subparsers, common_parser) -> None   (optional, static: its CLI commands)
    warm_up() -> None, cool_down() -> None   (optional, static: start what a run will likely
        need before the plan is made; stop it when another executor runs the plan)
    warm_imports() -> None   (optional, static: import what its runs import, in the build
        server (planner/cli/serve.py), which forks a process per command from itself)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from planner.core.storelayout import store_root
from planner.errors import ConfigError, UsageError

GROUP = "modelplan.executors"
DEFAULT_EXECUTOR = "local"  # conf/config.yaml's default
_warmed: list[type] = []


@dataclass
class RunOptions:
    """What the caller decides about a run, beside the plan itself."""

    store: Path | None = None             # None: the config's store
    quiet: bool = False
    debug: bool = False
    executor: dict[str, Any] = field(default_factory=dict)  # overrides config["executor"]


@cache
def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=GROUP)}


def executor_names() -> list[str]:
    return sorted(_entry_points())


def executor_class(name: str) -> type:
    eps = _entry_points()
    if name not in eps:
        raise ConfigError(f"executor: '{name}' is not an installed executor "
                          f"(installed: {', '.join(sorted(eps)) or 'none'}); install the "
                          f"package that provides it (e.g. pip install 'modelplan[{name}]')")
    return eps[name].load()


def warm_up(overrides: list[str]) -> None:
    """Let the executor the overrides name (else the default) start what a run's steps will
    likely need while the config is composed and planned; the executor that runs the plan
    keeps or stops it. An unknown executor name is left for composing to report."""
    names = [o.split("=", 1)[1] for o in overrides
             if o.split("=", 1)[0].lstrip("+~") in ("executor", "executor.name") and "=" in o]
    name = names[-1] if names else DEFAULT_EXECUTOR
    if name not in _entry_points():
        return
    cls = executor_class(name)
    if hasattr(cls, "warm_up"):
        cls.warm_up()
        _warmed.append(cls)


def make_executor(config: dict[str, Any], options: RunOptions) -> Any:
    settings = {**config["executor"], **options.executor}
    root = options.store or store_root(config)
    cls = executor_class(settings["name"])
    for other in {c for c in _warmed if c is not cls}:
        other.cool_down()
    _warmed.clear()
    return cls(root, settings, quiet=options.quiet, debug=options.debug)


def run_plan(ir: dict[str, Any], outputs_dir: Path | None, overrides: list[str],
             options: RunOptions) -> dict[str, Any]:
    """Run one plan; returns its run record (schemas/run.schema.json)."""
    return make_executor(ir["config"], options).run(ir, outputs_dir, overrides)


def run_sweep(sweep: Any, sweep_dir: Path, options: RunOptions) -> dict[str, Any]:
    """Run every job of a planned sweep as one merged DAG; returns the sweep summary."""
    configs = [j.plan.config for j in sweep.jobs if j.plan is not None]
    if not configs:
        raise UsageError(*[f"job {j.index}: {j.error}" for j in sweep.jobs])
    names = sorted({c["executor"]["name"] for c in configs})
    if len(names) > 1:
        raise UsageError(f"executor: a sweep runs on one executor, these jobs ask for "
                         f"{', '.join(names)}; sweep over the others in separate runs")
    return make_executor(configs[0], options).run_sweep(sweep, sweep_dir)


def inspect_hierarchy(described: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The module tree of a random-weight trace, by the executor the config names."""
    cls = executor_class(config["executor"]["name"])
    if not hasattr(cls, "inspect_hierarchy"):
        raise UsageError(f"inspect --hierarchy: executor {config['executor']['name']!r} "
                         "cannot trace models; use executor=local")
    return cls.inspect_hierarchy(described, config)


def diagnose_accuracy(config: dict[str, Any], reference: Path, candidate: Path,
                      source: Path | None, samples: int, target_pieces: int = 0,
                      target_samples: int = 2, quiet: bool = False) -> dict[str, Any]:
    """Per-module SQNR and cosine (cumulative and own) of a QDQ graph against its fp32 graph,
    by the executor the config names; with `target_pieces`, that many of the worst modules'
    pieces also run on the config's target, on `target_samples` inputs."""
    cls = executor_class(config["executor"]["name"])
    if not hasattr(cls, "diagnose_accuracy"):
        raise UsageError(f"diagnose: executor {config['executor']['name']!r} cannot compare "
                         "graphs; use executor=local")
    on_target = {"pieces": target_pieces, "samples": target_samples,
                 "target": config["target"]} if target_pieces else None
    return cls.diagnose_accuracy(reference, candidate, source, samples, on_target, quiet)


def add_plugin_commands(sub: Any, common: Any) -> None:
    """Let every installed executor register its own CLI commands."""
    for name in executor_names():
        cls = executor_class(name)
        if hasattr(cls, "add_commands"):
            cls.add_commands(sub, common)
