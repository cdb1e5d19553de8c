"""Long-lived warm workers for a run's heavy steps: processes forked from the run's fork server
(executors/run/forkserver.py) that each run several steps, one after another. What a step loads on
first use (ONNX Runtime's execution providers, the QNN backend, a tokenizer, a model type's
modeling code) is then loaded once per worker, not once per step.

A step goes to the idle worker that built one of its inputs (a chain of steps stays on one
worker), else to the idle worker whose last step used the same tools (Op.tools), else to any
idle worker, else to a new one. A pool belongs to the local runner that made it (one run or
sweep) and is closed with it; elsewhere (a Ray task) every heavy step gets a fresh child.

What a fresh child per step guaranteed still holds: a crash (a signal, the OOM killer) ends
that worker and that step only, reported naming the step, and the next step gets a new worker;
an interrupt kills every worker; a worker ignores SIGINT, is named `mp:<step id>` while it runs
a step (`mp:idle` between steps) and dies with the fork server. A worker gives its memory back
by exiting: after a step that failed, and after a step that left it more than RECYCLE_MB above
the memory it started with (a big model's step), so big steps still start from a small process.
"""

from __future__ import annotations

import itertools
import threading
from contextlib import suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executors.run import forkserver

if TYPE_CHECKING:
    from executors.run.monitor import StepMonitor
    from executors.run.step_api import StepContext, StepResult

RECYCLE_MB = 256.0  # a worker this far above its starting RSS after a step is replaced


@dataclass
class Worker:
    """One worker process and what the scheduler knows of it."""

    name: str
    proc: Any
    conn: Connection
    built: set[str] = field(default_factory=set)   # keys of the steps it built
    tools: frozenset[str] = frozenset()              # the tools of its last step

    def alive(self) -> bool:
        return self.proc.exitcode is None and self.proc.is_alive()

    def stop(self, kill: bool = False) -> None:
        """Let it exit (its pipe closed: it reads end-of-file), or kill it."""
        if kill and self.proc.exitcode is None:
            with suppress(OSError, ValueError):
                self.proc.kill()
        with suppress(OSError):
            self.conn.close()
        if kill:
            self.proc.join()
        forkserver.forget(self.proc)

    def affinity(self, inputs: set[str], tools: frozenset[str]) -> tuple[bool, bool]:
        return bool(self.built & inputs), self.tools == tools


class Pool:
    """The run's workers: idle ones wait here between steps; a busy one belongs to the builder
    thread that acquired it."""

    def __init__(self) -> None:
        self._idle: list[Worker] = []
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._closed = False

    def apply(self, ctx: StepContext, mon: StepMonitor) -> StepResult:
        """`apply_step(ctx)` on a warm worker; errors are raised here as they were there."""
        worker = self._acquire(ctx)
        healthy = False
        try:
            mon.watch(worker.proc.pid, worker.name)
            try:
                worker.conn.send(forkserver.spec(ctx))
            except OSError:  # it ended while idle, before it got the step: a new one
                worker.stop(kill=True)
                worker = self._new()
                mon.watch(worker.proc.pid, worker.name)
                worker.conn.send(forkserver.spec(ctx))
            got = forkserver.outcome(worker.conn, worker.proc, ctx)
            if got is None:
                worker.proc.join()
                raise forkserver.died(ctx, worker.proc.exitcode)
            status, payload, peak_mb, rss_mb, start_mb = got
            mon.report(peak_mb)
            worker.built.add(ctx.step["key"])
            worker.tools = frozenset(ctx.op.tools)
            healthy = status == "ok" and rss_mb - start_mb <= RECYCLE_MB
            if status != "ok":
                raise forkserver.rebuilt(payload)
            return forkserver.result(payload)
        finally:  # an interrupt, a crash, a failure or a big step: this worker goes
            self._release(worker, healthy)

    def _acquire(self, ctx: StepContext) -> Worker:
        inputs = {Path(p).name for p in ctx.inputs.values()}
        tools = frozenset(ctx.op.tools)
        with self._lock:
            gone = [w for w in self._idle if not w.alive()]
            self._idle = [w for w in self._idle if w not in gone]
            # the most recently idle among the best placed: its caches are the warmest
            best = max(reversed(self._idle), key=lambda w: w.affinity(inputs, tools),
                       default=None)
            if best is not None:
                self._idle.remove(best)
        for worker in gone:
            worker.stop(kill=True)
        return best or self._new()

    def _new(self) -> Worker:
        with self._lock:
            name = f"w{next(self._numbers)}"
        proc, conn = forkserver.start_worker(name)
        return Worker(name, proc, conn)

    def _release(self, worker: Worker, healthy: bool) -> None:
        with self._lock:
            keep = healthy and not self._closed and worker.alive()
            if keep:
                self._idle.append(worker)
        if not keep:
            worker.stop(kill=not healthy)

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for worker in idle:
            worker.stop()
