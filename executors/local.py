"""The local executor plugin (`executor=local`): runs a Plan IR's steps in this machine's
processes against the content-addressed store (docs/architecture.md §5), through the one scheduler
(executors/run/stepdag.py) with `LocalRunner` as its runner: a heavy step runs on one of the
run's warm worker processes (executors/run/workers.py), a sweep's steps on up to -j builder
threads at once.

It is found by name through the `modelplan.executors` entry-point group; the planner never
imports it. It registers the `modelplan store ls|verify|gc` commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from executors import execution
from executors.run import forkserver
from executors.run.outcome import StepOutcome, Work
from executors.run.stepdag import measures
from executors.run.workers import Pool
from executors.run.wrapper import check_elision, execute_step, has_implementation
from executors.runtime.adapters import available_eps
from executors.store.content import Store
from planner.core.ops import OPS, Trait
from planner.errors import PlanError


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


class LocalRunner:
    """Runs ready steps here: inline (one at a time), or with more than one builder thread a
    build on a builder thread (a step the store has is described inline); either way a heavy
    step's `apply_step` runs on a warm worker process. Measurements run inline, alone."""

    name = "local"
    measure_slots = 1

    def __init__(self, store: Store, steps: list[dict[str, Any]], jobs: int,
                 say: Any, quiet: bool, debug: bool) -> None:
        self.store, self.say, self.quiet, self.debug = store, say, quiet, debug
        tools = forkserver.heavy_tools(steps)
        forkserver.preload(tools, start=bool(tools))
        builds = {s["key"] for s in steps if jobs > 1 and s["action"] == "run"
                  and not measures(s) and self.store.get(s["key"]) is None}
        self.slots = jobs if len(builds) > 1 else 1  # threads only for more than one build
        self.threads = ThreadPoolExecutor(self.slots, thread_name_prefix="modelplan-build") \
            if self.slots > 1 else None
        self.pool = Pool()  # a chain of steps stays on one warm worker

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.threads is not None:
            self.threads.shutdown()
        self.pool.close()

    def can_run(self, step: dict[str, Any]) -> bool:
        return has_implementation(step["op"]) and (
            not OPS[step["op"]].has(Trait.NEEDS_EP) or step["params"].get("ep") in self.eps)

    @cached_property
    def eps(self) -> set[str]:
        return available_eps()

    def start(self, work: Work) -> Future[StepOutcome]:
        if self.threads is None or measures(work.step) or work.step["action"] == "elided" \
                or self.store.get(work.key) is not None:
            done: Future[StepOutcome] = Future()
            done.set_result(self._execute(work))
            return done
        return self.threads.submit(self._execute, work)

    def _execute(self, work: Work) -> StepOutcome:
        if work.step["action"] == "elided":
            return check_elision(work.step, work.inputs)
        return execute_step(self.store, work.step, work.key, work.inputs, work.out_dir,
                            self.say, self.pool.apply, work.label, self.quiet, self.debug)

    def finished(self, work: Work, outcome: StepOutcome) -> None:
        """execute_step has said it all."""

    def stop(self) -> None:
        """End the running steps (their processes killed, their temporary output removed)
        and wait for their threads."""
        forkserver.kill_all()
        if self.threads is not None:
            self.threads.shutdown(wait=True, cancel_futures=True)


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
    def warm_imports() -> None:
        forkserver.import_tools()

    @staticmethod
    def cool_down() -> None:
        forkserver.preload(())  # stops a server warm_up started

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def runner(self, steps: list[dict[str, Any]], jobs: int) -> LocalRunner:
        return LocalRunner(self.store, steps, jobs, self.say, self.quiet, self.debug)

    def run(self, ir: dict[str, Any], outputs_dir: Path | None,
            overrides: list[str] | None = None) -> dict[str, Any]:
        """One plan, one step at a time (a big model's steps never overlap in memory)."""
        check_runnable(ir)
        with self.runner(ir["steps"], jobs=1) as runner:
            return execution.run_plan(self.name, self.store, runner, ir, outputs_dir,
                                      list(overrides or []), self.say)

    def run_sweep(self, sweep: Any, sweep_dir: Path) -> dict[str, Any]:
        irs = [job.ir for job in sweep.jobs if job.ir is not None]
        for ir in irs:
            check_runnable(ir)
        jobs = self.options.get("jobs") or os.cpu_count() or 1
        with self.runner([s for ir in irs for s in ir["steps"]], jobs) as runner:
            return execution.run_sweep(self.name, self.store, runner, sweep, sweep_dir,
                                       self.say)

    # -- inspection ----------------------------------------------------------------------
    @staticmethod
    def inspect_hierarchy(described: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        from executors.commands.hierarchy_trace import hierarchy_counts

        return hierarchy_counts(described, config)

    @staticmethod
    def diagnose_accuracy(reference: Path, candidate: Path, source: Path | None,
                          samples: int, on_target: dict[str, Any] | None = None,
                          quiet: bool = False) -> dict[str, Any]:
        """Per-module accuracy on the CPU EP (cumulative and own); with `on_target`
        ({"pieces": N, "samples": M, "target": the config's target}), the N worst modules'
        pieces also on that target."""
        from executors.diagnosis.module_error import diagnose

        say = None if quiet else (lambda text: print(text, file=sys.stderr, flush=True))
        result = diagnose(reference, candidate, source, samples, say)
        if on_target and on_target["pieces"] > 0:
            from executors.diagnosis.target_error import diagnose_on_target

            result["target_pieces"] = diagnose_on_target(
                reference, candidate, source, result["modules"], on_target["pieces"],
                on_target["target"], on_target["samples"], say)
        return result

    # -- commands ------------------------------------------------------------------------
    @staticmethod
    def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
        from executors.commands import check, generate, store

        store.add_command(sub, common)
        generate.add_command(sub, common)
        check.add_command(sub, common)
