"""The Ray executor plugin (`executor=ray`, from modelplan[ray]): the same plan, the same
step wrapper and the same content-addressed store as the local executor, with each unique
step a Ray task placed by the resources it asks for (planner/core/resources.py).

`run` is one plan as a merged DAG of one job; `run_sweep` is every job's plan merged (the
sweep runner of executors/run/sweep.py, with Ray as its scheduler). If a proof fails on a real
input, that plan re-keys what follows it step by step (the local executor's sequential run,
each step still a Ray task).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from executors.local import LocalExecutor, check_runnable
from executors.ray import tasks
from executors.ray.cluster import Cluster
from executors.ray.dag import CANCEL_GRACE_S, RayDag
from executors.run import stepdag
from executors.run.sweep import SweepRunner, job_record
from executors.store.content import Store
from planner.core import resources

DEFAULTS = {"address": None, "num_cpus": None, "retries": 3, "step_retries": 0, "resources": {}}


class RayExecutor:
    name = "ray"

    def __init__(self, store_root: Path, options: dict[str, Any] | None = None,
                 quiet: bool = False, debug: bool = False) -> None:
        self.store = Store(store_root)
        self.options = {**DEFAULTS, **(options or {})}
        self.quiet, self.debug = quiet, debug
        self.cluster: Cluster | None = None

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    @contextmanager
    def session(self, irs: list[dict[str, Any]]) -> Iterator[Cluster]:
        """A checked cluster for these plans (re-entered, the one already open)."""
        if self.cluster is not None:
            yield self.cluster
            return
        local = self.options["address"] is None
        for ir in irs if local else []:
            check_runnable(ir)  # a Ray of this machine: its EPs are this machine's
        with Cluster(self.options, self.say, resources.devices(irs) if local else []) as c:
            c.check(irs, self.store)
            self.cluster = c
            try:
                yield c
            finally:
                self.cluster = None

    # -- one plan ------------------------------------------------------------------------
    def run(self, ir: dict[str, Any], outputs_dir: Path | None,
            overrides: list[str] | None = None) -> dict[str, Any]:
        with self.session([ir]) as cluster:
            started = time.time()
            unique, ids = stepdag.single(ir)
            dag = RayDag(cluster, self.store, self.options, self.say)
            outcomes = dag.run(unique, stepdag.dependencies(unique, ids), lambda _k: outputs_dir)
            if any(o["status"] == "unelided" for o in outcomes.values()):
                self.say("a proof did not hold on the real input: re-keying this plan's steps")
                return _Sequential(self, cluster).run(ir, outputs_dir, overrides)
            return job_record(self.name, self.store, ir, outcomes, outputs_dir,
                              list(overrides or []), started)

    # -- a sweep -------------------------------------------------------------------------
    def run_sweep(self, sweep: Any, sweep_dir: Path) -> dict[str, Any]:
        with self.session([j.ir for j in sweep.jobs if j.ir is not None]) as cluster:
            return _RaySweep(self, cluster).run(sweep, sweep_dir)

    # -- commands ------------------------------------------------------------------------
    @staticmethod
    def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
        """None of its own: the store commands come with the local executor."""


class _RaySweep(SweepRunner):
    """The sweep runner with Ray as its scheduler."""

    def __init__(self, executor: RayExecutor, cluster: Cluster) -> None:
        super().__init__(executor)  # type: ignore[arg-type]
        self.cluster = cluster

    def run_dag(self, unique: stepdag.Unique, deps: stepdag.Deps,
                sweep_dir: Path) -> dict[str, dict]:
        dag = RayDag(self.cluster, self.store, self.executor.options, self.say)
        return dag.run(unique, deps, lambda key: sweep_dir / ".shared" / key[:12])


class _Sequential(LocalExecutor):
    """The local executor's step-by-step run (it re-keys after a failed proof), each step a
    Ray task on a node that has what it asks for."""

    name = "ray"

    def __init__(self, executor: RayExecutor, cluster: Cluster) -> None:
        super().__init__(executor.store.root, executor.options, executor.quiet, executor.debug)
        self.cluster, self.ray = cluster, cluster.ray
        self.remote = cluster.ray.remote(tasks.build_step)

    def check_runnable(self, ir: dict[str, Any]) -> None:
        """Checked when the session opened."""

    def execute(self, step: dict[str, Any], key: str, inputs: dict[str, Path],
                out_dir: Path | None, label: str) -> dict[str, Any]:
        options = self.cluster.task_options(resources.request(step, self.options))
        self.say(f"{label} {step['id']:<10} running as a Ray task")
        task = self.remote.options(max_retries=self.options["retries"], retry_exceptions=False,
                                   name=f"{step['id']}:{key[:12]}", **options)
        ref = task.remote(str(self.store.root), step, key, {r: str(p) for r, p in inputs.items()},
                          str(out_dir) if out_dir else None, self.options["step_retries"])
        try:
            return self.ray.get(ref)
        except KeyboardInterrupt:
            self.ray.cancel(ref, force=True)
            self.ray.wait([ref], timeout=CANCEL_GRACE_S)  # its worker ends, freeing the lock
            self.store.discard_leftovers(key)
            raise
