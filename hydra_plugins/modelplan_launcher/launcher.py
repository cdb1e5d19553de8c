"""ModelplanLauncher: a Hydra launcher that runs a sweep as one merged modelplan DAG."""

# No `from __future__ import annotations`: Hydra imports plugins outside sys.modules,
# where dataclasses cannot resolve string annotations.

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class ModelplanLauncherConf:
    _target_: str = "hydra_plugins.modelplan_launcher.launcher.ModelplanLauncher"
    jobs: int = 0  # parallel workers; 0 = the number of cores


ConfigStore.instance().store(group="hydra/launcher", name="modelplan",
                             node=ModelplanLauncherConf, provider="modelplan")


class JobFailed(RuntimeError):
    """A sweep job that did not finish (its run record says why)."""


class ModelplanLauncher(Launcher):
    def __init__(self, jobs: int = 0) -> None:
        self.workers = jobs or os.cpu_count() or 1
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from planner.cli.app import RunOptions, run_sweep
        from planner.config.conftree import from_hydra
        from planner.planning import plan_jobs

        assert self.config is not None
        sweep_dir = Path(self.config.hydra.sweep.dir).resolve()
        sweep = plan_jobs([list(o) for o in job_overrides], first_index=initial_job_idx,
                          tree=from_hydra(self.config.hydra))
        if all(j.plan is None for j in sweep.jobs):  # nothing to run: every config failed
            return [_job_return({"overrides": j.overrides, "status": "failed", "record": None,
                                 "error": j.error}) for j in sweep.jobs]
        summary = run_sweep(sweep, sweep_dir, RunOptions(executor={"jobs": self.workers}))
        return [_job_return(j) for j in summary["jobs"]]


def _job_return(job: dict[str, Any]) -> JobReturn:
    ret = JobReturn(overrides=job["overrides"], task_name="modelplan",
                    working_dir=(job["record"] or {}).get("outputs_dir"))
    if job["status"] == "ok":
        ret.status = JobStatus.COMPLETED
        ret.return_value = {"status": "ok", "deliverable": job["record"]["deliverable"]}
    else:
        ret.status = JobStatus.FAILED
        ret.return_value = JobFailed(job["error"] or "failed")
    return ret
