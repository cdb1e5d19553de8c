"""The Ray executor plugin (`executor=ray`, from modelplan[ray]): the same plan, the same
scheduler (executors/run/stepdag.py), the same step wrapper and the same content-addressed
store as the local executor, with `RayRunner` (executors/ray/runner.py) as the runner: each
step a Ray task placed by the resources it asks for (planner/core/resources.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from executors import execution
from executors.local import check_runnable
from executors.ray.cluster import Cluster
from executors.ray.runner import RayRunner
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

    def run(self, ir: dict[str, Any], outputs_dir: Path | None,
            overrides: list[str] | None = None) -> dict[str, Any]:
        with self.session([ir]) as cluster, \
                RayRunner(cluster, self.store, self.options, self.say) as runner:
            return execution.run_plan(self.name, self.store, runner, ir, outputs_dir,
                                      list(overrides or []), self.say)

    def run_sweep(self, sweep: Any, sweep_dir: Path) -> dict[str, Any]:
        irs = [j.ir for j in sweep.jobs if j.ir is not None]
        with self.session(irs) as cluster, \
                RayRunner(cluster, self.store, self.options, self.say) as runner:
            return execution.run_sweep(self.name, self.store, runner, sweep, sweep_dir,
                                       self.say)

    @staticmethod
    def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
        """None of its own: the store commands come with the local executor."""
