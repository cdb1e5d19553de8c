"""Run a merged DAG (executors/run/stepdag.py) on Ray: one task per unique key, its inputs passed
as the object refs of the tasks that build them, so Ray starts each step when its inputs are
done, on a node that has what the step asks for. Measurements (perf) are submitted once every
build is done, each on a whole node.

Ray re-runs a task whose worker died (executor.retries); a step that fails for its own reason
is re-run inside its task only as often as executor.step_retries says. Ctrl-C cancels every
task; after any run, build directories that killed workers left are removed under their key's
lock, so the store keeps only complete entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from executors.ray import tasks
from executors.ray.cluster import Cluster
from executors.run import stepdag
from executors.store.content import Store
from planner.core import resources

CANCEL_GRACE_S = 10.0   # a cancelled step gets this long to remove its build dir itself


class RayDag:
    def __init__(self, cluster: Cluster, store: Store, settings: dict[str, Any],
                 say: Callable[[str], None]) -> None:
        self.cluster, self.ray, self.store = cluster, cluster.ray, store
        self.settings, self.say = settings, say
        self.remote = self.ray.remote(tasks.run_step)
        self.submitted: dict[str, Any] = {}   # key -> object ref

    def run(self, unique: stepdag.Unique, deps: stepdag.Deps,
            out_dir: Callable[[str], Path | None]) -> dict[str, dict[str, Any]]:
        """Every unique key's outcome (see executors/run/stepdag.py), with `node` and `ended`."""
        order = stepdag.topological(unique, deps)
        builds = [k for k in order if not stepdag.measures(unique[k]["step"])]
        outcomes: dict[str, dict[str, Any]] = {}
        try:
            for key in builds:
                self._submit(key, unique[key]["step"], deps[key], out_dir(key))
            self._collect(builds, unique, deps, outcomes)
            measures = [k for k in order if k not in outcomes and k not in builds]
            runnable = [k for k in measures if self._inputs_ok(k, deps, outcomes)]
            for turn, key in enumerate(runnable):
                self._submit(key, unique[key]["step"], deps[key], out_dir(key), turn)
            self._collect(runnable, unique, deps, outcomes)
            for key in measures:
                outcomes.setdefault(key, {**stepdag.SKIPPED, "ended": time.time()})
        except BaseException:
            self._cancel()
            raise
        finally:
            self._discard_leftovers()
        return outcomes

    # -- submitting ----------------------------------------------------------------------
    def _submit(self, key: str, step: dict[str, Any], dep_keys: dict[str, str],
                out_dir: Path | None, turn: int = 0) -> None:
        options = self.cluster.task_options(resources.request(step, self.settings), turn)
        roles = list(dep_keys)
        self.submitted[key] = self.remote.options(
            max_retries=self.settings["retries"], retry_exceptions=False,
            name=f"{step['id']}:{key[:12]}", **options,
        ).remote(str(self.store.root), step, key, str(out_dir) if out_dir else None,
                 self.settings["step_retries"], roles, *[self.submitted[dep_keys[r]] for r in roles])

    # -- collecting ----------------------------------------------------------------------
    def _collect(self, keys: list[str], unique: stepdag.Unique, deps: stepdag.Deps,
                 outcomes: dict[str, dict[str, Any]]) -> None:
        """Outcomes as tasks finish, inputs before the steps that read them."""
        pending = [self.submitted[k] for k in keys]
        key_of = {ref: k for k, ref in zip(keys, pending, strict=True)}
        while pending:
            ready, pending = self.ray.wait(pending, num_returns=1)
            for ref in ready:
                key = key_of[ref]
                outcomes[key] = {**self._outcome(key, ref, unique[key]["step"], deps, outcomes),
                                 "ended": time.time()}
                self._report(unique[key]["step"], outcomes[key], len(outcomes), len(unique))

    def _outcome(self, key: str, ref: Any, step: dict[str, Any], deps: stepdag.Deps,
                 outcomes: dict[str, dict[str, Any]]) -> dict[str, Any]:
        from ray import exceptions as rx

        try:
            return self.ray.get(ref)
        except rx.RayError as exc:
            if not self._inputs_ok(key, deps, outcomes):
                return dict(stepdag.SKIPPED)  # Ray passed an input's failure on
            return {"status": "failed", "action": "run", "error": self._describe(step, exc)}

    @staticmethod
    def _inputs_ok(key: str, deps: stepdag.Deps, outcomes: dict[str, dict[str, Any]]) -> bool:
        return all(outcomes.get(d, {}).get("status") == "ok" for d in deps[key].values())

    def _describe(self, step: dict[str, Any], exc: Exception) -> str:
        from ray import exceptions as rx

        what = f"step {step['id']} ({step['op']})"
        tries = self.settings["retries"] + 1
        if isinstance(exc, rx.WorkerCrashedError):
            return (f"{what}: its Ray worker process died {tries} time(s) (killed, or out of "
                    "memory); nothing was stored under its key; give it more memory "
                    f"(+executor.resources.{step['op']}.memory=BYTES) or raise executor.retries")
        if isinstance(exc, rx.NodeDiedError | rx.ObjectLostError | rx.OwnerDiedError):
            return (f"{what}: the Ray node running it was lost ({type(exc).__name__}); "
                    "nothing was stored under its key; rerun when the cluster is whole")
        if isinstance(exc, rx.TaskCancelledError):
            return f"{what}: cancelled"
        cause = getattr(exc, "cause", None) or exc
        text = str(cause).strip().splitlines()
        return (f"{what} failed in its Ray task: {type(cause).__name__}: "
                f"{text[0] if text else ''}; rerun with --debug for the traceback")

    def _report(self, step: dict[str, Any], outcome: dict[str, Any], done: int,
                total: int) -> None:
        node = outcome.get("node")
        where = f" on {node['ip']} ({node['id'][:8]})" if node else ""
        label = f"[{done:>{len(str(total))}}/{total}] {step['id']:<10}"
        if outcome["status"] != "ok":
            self.say(f"{label} {outcome['status'].upper()}: {outcome.get('error')}")
        elif outcome["action"] == "run":
            self.say(f"{label} done in {outcome.get('wall_s', 0):.1f} s{where}")
        else:
            self.say(f"{label} {outcome['action']}{where}")

    # -- stopping ------------------------------------------------------------------------
    def _cancel(self) -> None:
        """Cancel every task: first as Ctrl-C inside the task (its build dir is removed on the
        way out), then, after a grace period, by ending the worker."""
        refs = list(self.submitted.values())
        if not refs:
            return
        self.say(f"Ray: cancelling {len(refs)} task(s)")
        for force in (False, True):
            for ref in refs:
                try:
                    self.ray.cancel(ref, force=force)
                except Exception:  # noqa: BLE001, S112 - finished or already cancelled
                    continue
            _, refs = self.ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
            if not refs:
                return

    def _discard_leftovers(self) -> None:
        removed = sum(self.store.discard_leftovers(k) for k in self.submitted)
        if removed:
            self.say(f"Ray: removed {removed} build dir(s) that stopped workers left")

