"""The Ray runner: each ready step the scheduler (executors/run/stepdag.py) starts is a Ray task
placed by the resources it asks for (planner/core/resources.py), on a node that has them;
measurements (perf) each on a whole node, round robin over the nodes that fit.

Ray re-runs a task whose worker died (executor.retries); a step that fails for its own reason
is re-run inside its task only as often as executor.step_retries says. An interrupt cancels
every task; when the runner closes, build directories that killed workers left are removed
under their key's lock, so the store keeps only complete entries.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Self

from executors.ray import remote_functions
from executors.ray.cluster import Cluster
from executors.run.outcome import StepOutcome, Work, failed
from executors.store.content import Store
from planner.core import resources

CANCEL_GRACE_S = 10.0   # a cancelled step gets this long to remove its build dir itself
SLOTS = 1 << 20         # Ray queues tasks by the resources they ask for: start every ready one


class RayRunner:
    name = "ray"
    slots = SLOTS
    measure_slots = SLOTS

    def __init__(self, cluster: Cluster, store: Store, settings: dict[str, Any],
                 say: Callable[[str], None]) -> None:
        self.cluster, self.ray, self.store = cluster, cluster.ray, store
        self.settings, self.say = settings, say
        self.remote = self.ray.remote(remote_functions.build_step)
        self.submitted: dict[str, Any] = {}   # key -> object ref

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        removed = sum(self.store.discard_leftovers(k) for k in self.submitted)
        if removed:
            self.say(f"Ray: removed {removed} build dir(s) that stopped workers left")

    def can_run(self, step: dict[str, Any]) -> bool:
        req = resources.request(step, self.settings)
        return any(node.has(req) for node in self.cluster.nodes)

    def start(self, work: Work) -> Future[StepOutcome]:
        options = self.cluster.task_options(resources.request(work.step, self.settings),
                                            work.turn)
        ref = self.remote.options(
            max_retries=self.settings["retries"], retry_exceptions=False,
            name=f"{work.step['id']}:{work.key[:12]}", **options,
        ).remote(str(self.store.root), work.step, work.key,
                 {r: str(p) for r, p in work.inputs.items()},
                 str(work.out_dir) if work.out_dir else None, self.settings["step_retries"])
        self.submitted[work.key] = ref
        outcome: Future[StepOutcome] = Future()

        def settle(done: Future[Any]) -> None:
            try:
                outcome.set_result(done.result())
            except Exception as exc:  # noqa: BLE001 - a Ray error is the step's failure
                outcome.set_result(failed(self._describe(work.step, exc)))

        ref.future().add_done_callback(settle)
        return outcome

    def finished(self, work: Work, outcome: StepOutcome) -> None:
        if not outcome.ok or outcome.action == "elided":  # the scheduler has said those
            return
        node = outcome.node
        where = f" on {node['ip']} ({node['id'][:8]})" if node else ""
        if outcome.action == "run":
            self.say(f"{work.label} {work.step['id']:<10} done in {outcome.wall_s:.1f} s{where}")
        else:
            self.say(f"{work.label} {work.step['id']:<10} {outcome.action}{where}")

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

    def stop(self) -> None:
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
