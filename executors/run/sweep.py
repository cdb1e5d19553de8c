"""Run a sweep as one merged DAG: every unique key is built once, in dependency order, and one
failing step stops only the jobs that need it. `SweepRunner` turns the DAG's outcomes into job
records (the same builder as single runs, executors/run/records.py) and results files; its
`run_dag` is the local executor's: up to -j steps at a time on builder threads, ready steps
longest remaining path first, each heavy step on one of the run's warm worker processes
(executors/run/workers.py: a chain stays on the worker that built its input, libraries load once
per sweep in the fork server, a crash ends one step only). An executor with its own scheduler
(executors/ray/) overrides only `run_dag`."""

from __future__ import annotations

import json
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executors.run import forkserver, interrupts, records, stepdag, workers
from executors.run.wrapper import execute_step
from executors.store import publish
from executors.store.content import Store
from executors.store.lease import Lease
from planner.core.ops import OPS, Trait
from planner.core.sweep import SweepPlan
from planner.errors import PlanError, RunInterrupted
from planner.render.results import csv_text, rows

if TYPE_CHECKING:
    from executors.local import LocalExecutor


def _worker(store_root: str, step: dict[str, Any], key: str, inputs: dict[str, str],
            out_dir: str | None) -> dict[str, Any]:
    """Build one unique step (on a builder thread; a heavy step in its own process)."""
    return execute_step(Store(Path(store_root)), step, key,
                        {r: Path(p) for r, p in inputs.items()},
                        Path(out_dir) if out_dir else None, lambda _msg: None, quiet=True)


class SweepRunner:
    def __init__(self, executor: LocalExecutor, jobs: int = 1) -> None:
        self.executor, self.store, self.jobs = executor, executor.store, max(1, jobs)
        self.say = executor.say
        self.pool: ThreadPoolExecutor | None = None

    def run(self, sweep: SweepPlan, sweep_dir: Path) -> dict[str, Any]:
        started, t0 = time.time(), time.perf_counter()
        unique = sweep.unique
        ids = {j.index: {s["id"]: s["key"] for s in j.ir["steps"]} for j in sweep.jobs if j.ir}
        with interrupts.handling(forkserver.kill_all), Lease(self.store.root) as lease:
            lease.hold(unique)  # store gc keeps every key of the sweep while it runs
            try:
                results = self.run_dag(unique, stepdag.dependencies(unique, ids), sweep_dir)
                jobs = [self._job_result(job, results, sweep_dir, started)
                        for job in sweep.jobs]
            except interrupts.Interrupted as stop:
                raise RunInterrupted(stop.signum, f"the sweep was interrupted by {stop.name}; "
                                     "the steps it finished are in the store: run it again "
                                     "to continue") from None
        summary = {
            "format_version": 1, "sweep_dir": str(sweep_dir), "executor": self.executor.name,
            "wall_s": round(time.perf_counter() - t0, 3),
            "jobs": jobs,
            "steps": [{"key": k, "id": v["step"]["id"], "op": v["step"]["op"],
                       "action": results.get(k, {}).get("action", "skipped"),
                       "status": results.get(k, {}).get("status", "skipped"), "jobs": v["jobs"]}
                      for k, v in unique.items()],
            "rewrites": [rw.record() for rw in sweep.merges],
        }
        write_results(summary, sweep_dir)
        return summary

    # -- the merged DAG ------------------------------------------------------------------
    def run_dag(self, unique: stepdag.Unique, deps: stepdag.Deps,
                sweep_dir: Path) -> dict[str, dict]:
        """Build every unique key once, dependencies first. Measurements (perf) wait until
        nothing else runs, then run one at a time (on a warm worker): a latency measured next
        to a build on the same cores would be wrong."""
        tools = forkserver.heavy_tools([v["step"] for v in unique.values()])
        forkserver.preload(tools, start=bool(tools))
        with workers.workers():  # a chain of steps stays on one warm worker
            return self._build_all(unique, deps, sweep_dir)

    def _build_all(self, unique: stepdag.Unique, deps: stepdag.Deps,
                   sweep_dir: Path) -> dict[str, dict]:
        """Ready steps start longest remaining path first (ties: the widest shared first)."""
        results: dict[str, dict[str, Any]] = {}
        running: dict[Future, str] = {}
        pending = set(unique)
        measure = {k for k, v in unique.items() if stepdag.measures(v["step"])}
        first = stepdag.longest_path_first(unique, deps)
        try:
            self._maybe_start_pool(unique)
            while pending or running:
                for key in sorted(pending - measure, key=first):
                    self._dispatch(key, unique, deps, results, running, pending, sweep_dir)
                if running:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for fut in done:
                        key = running.pop(fut)
                        results[key] = {**fut.result(), "ended": time.time()}
                        self._report(unique[key]["step"], results[key])
                    continue
                ready = sorted(k for k in pending & measure
                               if all(d in results for d in deps[k].values()))
                for key in ready:
                    self._dispatch(key, unique, deps, results, running, pending, sweep_dir,
                                   inline=True)
                if pending and not ready and not any(
                        all(d in results for d in deps[k].values()) for k in pending):
                    raise PlanError("the merged sweep DAG has a cycle or a missing input; "
                                    "this is a modelplan bug: report the sweep's overrides")
        except interrupts.Interrupted:
            self._stop_workers()  # before waiting for them: their steps end now
            raise
        finally:
            if self.pool is not None:
                self.pool.shutdown()
        return results

    def _stop_workers(self) -> None:
        """End the running steps (their processes killed, their temporary output removed)
        and wait for their threads."""
        forkserver.kill_all()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _maybe_start_pool(self, unique: dict[str, dict[str, Any]]) -> None:
        """Builder threads, when there is more than one step to build."""
        builds = [k for k, v in unique.items() if v["step"]["action"] == "run"
                  and not stepdag.measures(v["step"]) and self.store.get(k) is None]
        if self.jobs > 1 and len(builds) > 1:
            self.pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="modelplan-build")

    def _dispatch(self, key: str, unique: dict[str, dict[str, Any]], deps: dict[str, dict],
                  results: dict[str, dict], running: dict[Future, str], pending: set[str],
                  sweep_dir: Path, inline: bool = False) -> None:
        if stepdag.input_failed(deps[key], results):
            results[key] = {**stepdag.SKIPPED, "ended": time.time()}
            pending.discard(key)
        elif all(d in results for d in deps[key].values()):
            pending.discard(key)
            fut = self._start(unique[key]["step"], key, deps[key], results, sweep_dir, inline)
            if isinstance(fut, dict):
                results[key] = {**fut, "ended": time.time()}
            else:
                running[fut] = key

    def _start(self, step: dict[str, Any], key: str, dep_keys: dict[str, str],
               results: dict[str, dict], sweep_dir: Path,
               inline: bool = False) -> Future | dict[str, Any]:
        inputs = {role: results[k]["path"] for role, k in dep_keys.items()}
        if step["action"] == "elided":
            return stepdag.elided(step, inputs)
        entry = None if OPS[step["op"]].has(Trait.NOT_CACHEABLE) else self.store.get(key)
        if entry is not None:  # cached: no worker needed
            return execute_step(self.store, step, key, {r: Path(p) for r, p in inputs.items()},
                                None, lambda _m: None)
        self.say(f"  {step['id']:<10} {key[:12]} running")
        out_dir = sweep_dir / ".shared" / key[:12]
        if inline or self.pool is None:
            result = _worker(str(self.store.root), step, key, inputs, str(out_dir))
            self._report(step, result)
            return result
        return self.pool.submit(_worker, str(self.store.root), step, key, inputs, str(out_dir))

    def _report(self, step: dict[str, Any], result: dict[str, Any]) -> None:
        if result["status"] == "ok":
            self.say(f"  {step['id']:<10} done ({result.get('wall_s', 0):.1f} s)")
        else:
            self.say(f"  {step['id']:<10} FAILED: {result.get('error')}")

    # -- per-job records -----------------------------------------------------------------
    def _job_result(self, job: Any, results: dict[str, dict], sweep_dir: Path,
                    started: float) -> dict[str, Any]:
        out = {"index": job.index, "overrides": job.overrides}
        if job.plan is None:
            return {**out, "status": "failed", "error": job.error, "record": None}
        ir = job.ir
        if any(results.get(s["key"], {}).get("status") == "unelided" for s in ir["steps"]):
            # a proof failed on the real input: this job re-keys, so it runs on its own
            record = self.executor.run(ir, sweep_dir / job.name, job.overrides)
        else:
            record = job_record(self.executor.name, self.store, ir, results,
                                sweep_dir / job.name, job.overrides, started, job.index)
        return {**out, "status": record["status"],
                "error": record["error"]["message"] if record["error"] else None,
                "record": record}


def job_record(executor: str, store: Store, ir: dict[str, Any], results: dict[str, dict],
               out_dir: Path | None, overrides: list[str], started: float,
               job: int | None = None) -> dict[str, Any]:
    """A job's run record from the merged DAG's outcomes, published to `out_dir` (if any) and
    saved: it started with the sweep and took until its last step was done."""
    steps, out_dirs = [], {}
    for s in ir["steps"]:
        r = results.get(s["key"])
        if r is None or r["status"] == "skipped":
            steps.append(records.skipped(s, s["key"]))
            continue
        fields = {f: r[f] for f in records.STEP_FIELDS if f in r}
        steps.append(records.step_record(s, s["key"], **fields))
        if r["status"] == "ok":
            out_dirs[s["id"]] = Path(r["path"])
    ended = max((results[s["key"]]["ended"] for s in ir["steps"] if s["key"] in results),
                default=started)
    record = records.run_record(
        ir, steps, executor=executor, store=store.root, started=started,
        wall_s=ended - started, overrides=overrides, deliverable=ir["deliverable"],
        outputs_dir=out_dir, job=job)
    if out_dir is not None:
        publish.outputs(record, out_dirs, out_dir)
    store.save_run(record)
    return record


def write_results(summary: dict[str, Any], sweep_dir: Path) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    table = rows(summary)
    (sweep_dir / "results.json").write_text(json.dumps(table, indent=2))
    tmp = sweep_dir / ".results.csv.tmp"
    tmp.write_text(csv_text(table))
    tmp.replace(sweep_dir / "results.csv")
    (sweep_dir / "sweep.json").write_text(json.dumps(summary, indent=2))
