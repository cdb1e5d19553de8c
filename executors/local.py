"""The local executor plugin (`executor=local`): runs a Plan IR's steps in this machine's
processes against the content-addressed store (DESIGN §5); a sweep runs as one merged DAG on a
pool of worker processes (executors/run/sweep.py).

It is found by name through the `modelplan.executors` entry-point group; the planner never
imports it. It registers the `modelplan store ls|verify|gc` commands.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executors.run import forkserver, interrupts, records, workers
from executors.run.wrapper import execute_step, has_implementation, premises_hold
from executors.runtime.adapters import available_eps
from executors.store import publish
from executors.store.content import Store
from executors.store.lease import Lease
from planner.core.keys import content_key
from planner.core.ops import OPS, Trait
from planner.errors import PlanError


@dataclass
class RunState:
    """What the run has learned so far: where outputs are, effective keys, failures."""

    out_dirs: dict[str, Path] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)   # elided step -> step standing for it
    unelided: set[str] = field(default_factory=set)       # elided in the plan, ran anyway
    failed: set[str] = field(default_factory=set)
    lease: Lease | None = None                            # the keys store gc must keep


def check_runnable(ir: dict[str, Any]) -> None:
    """Before any step runs: every op has an implementation here, and every execution
    provider a step needs (Trait.NEEDS_EP, its `ep` param) is installed."""
    missing = sorted({s["op"] for s in ir["steps"] if not has_implementation(s["op"])})
    if missing:
        raise PlanError(f"the plan needs op(s) {', '.join(missing)}, which the local executor "
                        "cannot run yet; nothing was run")
    have = available_eps()
    for s in ir["steps"]:
        ep = s["params"].get("ep")
        if OPS[s["op"]].has(Trait.NEEDS_EP) and ep not in have:
            raise PlanError(f"step {s['id']} needs the {ep} execution provider, which is not "
                            f"installed here (installed: {', '.join(sorted(have))}); install "
                            "modelplan[run] (onnxruntime-qnn), or plan for target=cpu; "
                            "nothing was run")


class LocalExecutor:
    name = "local"

    def __init__(self, store_root: Path, options: dict[str, Any] | None = None,
                 quiet: bool = False, debug: bool = False) -> None:
        self.store = Store(store_root)
        self.options = options or {}
        self.quiet = quiet
        self.debug = debug

    @staticmethod
    def warm_up() -> None:
        forkserver.warm_up()

    @staticmethod
    def cool_down() -> None:
        forkserver.preload(())  # stops a server warm_up started

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    # -- one plan ------------------------------------------------------------------------
    def run(self, ir: dict[str, Any], outputs_dir: Path | None,
            overrides: list[str] | None = None) -> dict[str, Any]:
        self.check_runnable(ir)
        tools = forkserver.heavy_tools(ir["steps"])
        forkserver.preload(tools, start=bool(tools))
        started, t0 = time.time(), time.perf_counter()
        state = RunState()
        with interrupts.handling(forkserver.kill_all), Lease(self.store.root) as state.lease:
            state.lease.hold(s["key"] for s in ir["steps"])  # store gc keeps them
            with workers.workers():  # the plan's chain runs on one warm worker
                steps, stop = self._steps(ir, state, outputs_dir)
            record = records.run_record(
                ir, steps, executor=self.name, store=self.store.root, started=started,
                wall_s=time.perf_counter() - t0, overrides=list(overrides or []),
                deliverable=state.alias.get(ir["deliverable"], ir["deliverable"]),
                outputs_dir=outputs_dir, interrupted_by=stop)
            if outputs_dir is not None:
                publish.outputs(record, state.out_dirs, outputs_dir)
            if self.store.save_run(record) is None:
                self.say(f"could not keep the run record in the store {self.store.root} (is "
                         "its disk full?); the run's outputs have their own copy")
        return record

    def _steps(self, ir: dict[str, Any], state: RunState,
               outputs_dir: Path | None) -> tuple[list[dict[str, Any]], str | None]:
        """Every step's record; after an interrupt, the step it stopped and the rest skipped,
        and the signal's name."""
        steps: list[dict[str, Any]] = []
        try:
            for i, step in enumerate(ir["steps"], 1):
                steps.append(self._step(ir, step, state, f"[{i}/{len(ir['steps'])}]",
                                        outputs_dir))
        except interrupts.Interrupted as stop:
            rest = ir["steps"][len(steps):]
            self.say(f"      {rest[0]['id']}: interrupted by {stop.name}; its temporary output "
                     "was removed")
            return steps + records.interrupted(rest, state.keys, stop.name), stop.name
        return steps, None

    def _step(self, ir: dict[str, Any], step: dict[str, Any], state: RunState, label: str,
              out_dir: Path | None) -> dict[str, Any]:
        inputs = self._effective_inputs(step, state)
        key = self._effective_key(ir, step, inputs, state)
        if any(src in state.failed for src in inputs.values()):
            state.failed.add(step["id"])
            self.say(f"{label} {step['id']:<10} skipped (an input step failed)")
            return records.skipped(step, key)
        proof_check = None
        if step["action"] == "elided":
            src = inputs[OPS[step["op"]].chain_role]
            held, detail = premises_hold(step, state.out_dirs[src], src)
            proof_check = {"held": held, "detail": detail}
            if held:
                state.alias[step["id"]] = src
                self.say(f"{label} {step['id']:<10} elided ({detail})")
                return records.step_record(step, key, proof_check=proof_check)
            state.unelided.add(step["id"])
            self.say(f"{label} {step['id']:<10} proof did not hold ({detail}); running it")
        ctx_inputs = {role: state.out_dirs[src] for role, src in inputs.items()}
        result = self.execute(step, key, ctx_inputs, out_dir, label)
        path = result.pop("path", None)
        rec = records.step_record(step, key, proof_check=proof_check, **result)
        if rec["status"] == "failed":
            state.failed.add(step["id"])
            self.say(f"      {step['id']}: FAILED: {rec['error']}")
        else:
            state.out_dirs[step["id"]] = Path(path)
        return rec

    def check_runnable(self, ir: dict[str, Any]) -> None:
        check_runnable(ir)

    def execute(self, step: dict[str, Any], key: str, inputs: dict[str, Path],
                out_dir: Path | None, label: str) -> dict[str, Any]:
        """Make one step's output exist (here: in this process); its outcome."""
        return execute_step(self.store, step, key, inputs, out_dir, self.say, label,
                            self.quiet, self.debug)

    def _effective_inputs(self, step: dict[str, Any], state: RunState) -> dict[str, str]:
        out = {}
        for role, src in step["inputs"].items():
            via = step.get("via", {}).get(role)
            src = via if via in state.unelided else src
            out[role] = state.alias.get(src, src)
        return out

    def _effective_key(self, ir: dict[str, Any], step: dict[str, Any], inputs: dict[str, str],
                       state: RunState) -> str:
        planned = {r: next(s["key"] for s in ir["steps"] if s["id"] == src)
                   for r, src in step["inputs"].items()}
        actual = {r: state.keys.get(src, planned[r]) for r, src in inputs.items()}
        key = step["key"] if actual == planned else content_key(step["op"], step["params"],
                                                                actual, ir["tools"])
        state.keys[step["id"]] = key
        if state.lease is not None:
            state.lease.hold([key])
        return key

    # -- a sweep -------------------------------------------------------------------------
    def run_sweep(self, sweep: Any, sweep_dir: Path) -> dict[str, Any]:
        from executors.run.sweep import SweepRunner

        for job in sweep.jobs:
            if job.ir is not None:
                check_runnable(job.ir)
        jobs = self.options.get("jobs") or os.cpu_count() or 1
        return SweepRunner(self, jobs).run(sweep, sweep_dir)

    # -- inspection ----------------------------------------------------------------------
    @staticmethod
    def inspect_hierarchy(described: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        from executors.runtime.inspect import hierarchy_counts

        return hierarchy_counts(described, config)

    # -- commands ------------------------------------------------------------------------
    @staticmethod
    def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
        from executors.store import cli

        cli.add_command(sub, common)
