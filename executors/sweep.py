"""Run a sweep as one merged DAG: every unique key is built once, by a pool of worker
processes, in dependency order. One failing step stops only the jobs that need it."""

from __future__ import annotations

import csv
import json
import os
import sys
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import suppress
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from executors import publish
from executors.local import LocalExecutor, check_implemented, execute_step, premises_hold
from executors.report import human_bytes, result_summary
from executors.store import Store
from planner.ops import OPS, Trait
from planner.sweep import SweepPlan


def _warm() -> None:
    """Worker initializer: the imports every step needs. torch and transformers load on first
    use only: on two cores a second worker importing them would slow the first one down."""
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401

    import executors.local  # noqa: F401


def _prefetch_measurement() -> None:
    from executors import qnn
    from executors.steps import perf  # noqa: F401

    with suppress(Exception):  # a missing EP is reported by the step itself
        qnn.qnn_devices()


def _worker(store_root: str, step: dict[str, Any], key: str, inputs: dict[str, str],
            out_dir: str | None) -> dict[str, Any]:
    """Build one unique step in a worker process."""
    return execute_step(Store(Path(store_root)), step, key,
                        {r: Path(p) for r, p in inputs.items()},
                        Path(out_dir) if out_dir else None, lambda _msg: None, quiet=True)


class SweepExecutor:
    def __init__(self, store: Store, jobs: int, quiet: bool = False, debug: bool = False) -> None:
        self.store, self.jobs, self.quiet, self.debug = store, max(1, jobs), quiet, debug
        self.pool: ProcessPoolExecutor | None = None

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def run(self, sweep: SweepPlan, sweep_dir: Path) -> dict[str, Any]:
        t0 = time.perf_counter()
        for job in sweep.jobs:
            if job.ir is not None:
                check_implemented(job.ir)
        unique = sweep.unique
        ids = {j.index: {s["id"]: s["key"] for s in j.ir["steps"]} for j in sweep.jobs if j.ir}
        results = self._run_dag(unique, ids, sweep_dir)
        jobs = [self._job_result(job, results, sweep_dir) for job in sweep.jobs]
        summary = {
            "format_version": 1, "sweep_dir": str(sweep_dir),
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
    def _run_dag(self, unique: dict[str, dict[str, Any]], ids: dict[int, dict[str, str]],
                 sweep_dir: Path) -> dict[str, dict]:
        """Build every unique key once, dependencies first. Measurements (perf) wait until
        nothing else runs, then run one at a time in this process: a latency measured next to
        a build on the same cores would be wrong."""
        # role -> key of the step each input names, within the job the step came from
        deps = {k: {role: ids[v["jobs"][0]][src] for role, src in v["step"]["inputs"].items()}
                for k, v in unique.items()}
        results: dict[str, dict[str, Any]] = {}
        running: dict[Future, str] = {}
        pending = set(unique)
        measure = {k for k, v in unique.items() if _measures(v["step"])}
        if measure:  # measurements run here later: load their libraries while workers build
            threading.Thread(target=_prefetch_measurement, daemon=True).start()
        try:
            self._maybe_start_pool(unique)
            while pending or running:
                for key in sorted(pending - measure, key=lambda k: _order(unique, k)):
                    self._dispatch(key, unique, deps, results, running, pending, sweep_dir)
                if running:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for fut in done:
                        key = running.pop(fut)
                        results[key] = fut.result()
                        self._report(unique[key]["step"], results[key])
                    continue
                if self.pool is not None and not pending - measure:
                    self.pool.shutdown(wait=False)  # workers exit while measurements run
                ready = sorted(k for k in pending & measure
                               if all(d in results for d in deps[k].values()))
                for key in ready:
                    self._dispatch(key, unique, deps, results, running, pending, sweep_dir,
                                   inline=True)
                if pending and not ready and not any(
                        all(d in results for d in deps[k].values()) for k in pending):
                    raise RuntimeError("sweep DAG has a cycle or a missing input")
        finally:
            if self.pool is not None:
                self.pool.shutdown()
        return results

    def _maybe_start_pool(self, unique: dict[str, dict[str, Any]]) -> None:
        """Start (and warm) the workers up front when there is real building to do."""
        builds = [k for k, v in unique.items() if v["step"]["action"] == "run"
                  and not _measures(v["step"]) and self.store.get(k) is None]
        if self.jobs > 1 and len(builds) > 1:
            self.pool = ProcessPoolExecutor(self.jobs, mp_context=get_context("spawn"),
                                            initializer=_warm)

    def _dispatch(self, key: str, unique: dict[str, dict[str, Any]], deps: dict[str, dict],
                  results: dict[str, dict], running: dict[Future, str], pending: set[str],
                  sweep_dir: Path, inline: bool = False) -> None:
        if any(d in results and results[d]["status"] != "ok" for d in deps[key].values()):
            results[key] = {"status": "skipped", "action": "run",
                            "error": "an input step failed"}
            pending.discard(key)
        elif all(d in results for d in deps[key].values()):
            pending.discard(key)
            fut = self._start(unique[key]["step"], key, deps[key], results, sweep_dir, inline)
            if isinstance(fut, dict):
                results[key] = fut
            else:
                running[fut] = key

    def _start(self, step: dict[str, Any], key: str, dep_keys: dict[str, str],
               results: dict[str, dict], sweep_dir: Path,
               inline: bool = False) -> Future | dict[str, Any]:
        inputs = {role: results[k]["path"] for role, k in dep_keys.items()}
        if step["action"] == "elided":
            src_role = OPS[step["op"]].chain_role
            held, detail = premises_hold(step, Path(inputs[src_role]), step["inputs"][src_role])
            if held:
                return {"status": "ok", "action": "elided", "path": inputs[src_role],
                        "proof_check": {"held": True, "detail": detail}}
            return {"status": "unelided", "action": "run", "error": detail}
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
    def _job_result(self, job: Any, results: dict[str, dict], sweep_dir: Path) -> dict[str, Any]:
        out = {"index": job.index, "overrides": job.overrides}
        if job.plan is None:
            return {**out, "status": "failed", "error": job.error, "record": None}
        ir = job.ir
        if any(results.get(s["key"], {}).get("status") == "unelided" for s in ir["steps"]):
            # a proof failed on the real input: this job re-keys, so it runs on its own
            record = LocalExecutor(self.store, self.debug, quiet=True).run(
                ir, job.name, sweep_dir, job.overrides)
        else:
            record = self._assemble(ir, job, results, sweep_dir)
        return {**out, "status": record["status"],
                "error": record["error"]["message"] if record["error"] else None,
                "record": record}

    def _assemble(self, ir: dict[str, Any], job: Any, results: dict[str, dict],
                  sweep_dir: Path) -> dict[str, Any]:
        steps, out_dirs, error = [], {}, None
        for s in ir["steps"]:
            r = results.get(s["key"], {"status": "skipped", "action": "run",
                                       "error": "an input step failed"})
            rec = {"id": s["id"], "op": s["op"], "key": s["key"], "action": r["action"],
                   "planned_action": s["action"], "status": r["status"],
                   "wall_s": r.get("wall_s", 0.0), "peak_rss_mb": r.get("peak_rss_mb", 0.0),
                   "outputs": r.get("outputs", {}), "digests": r.get("digests", {}),
                   "metrics": r.get("metrics", {}), "proof_check": r.get("proof_check"),
                   "error": r.get("error")}
            steps.append(rec)
            if r["status"] == "ok":
                out_dirs[s["id"]] = Path(r["path"])
            elif error is None:
                error = {"step": s["id"], "message": r.get("error") or r["status"]}
        deliverable = ir["deliverable"]
        record = {
            "format_version": 1, "run_id": f"{time.strftime('%Y%m%dT%H%M%S')}-"
                                          f"{uuid.uuid4().hex[:6]}",
            "status": "failed" if error else "ok", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "wall_s": 0.0, "executor": "local", "store": str(self.store.root),
            "config_digest": ir["config_digest"], "overrides": job.overrides,
            "deliverable": deliverable, "outputs_dir": str(sweep_dir / job.name),
            "steps": steps, "error": error,
        }
        publish.outputs(record, out_dirs, sweep_dir / job.name)
        self.store.save_run(record)
        return record


def _measures(step: dict[str, Any]) -> bool:
    return OPS[step["op"]].has(Trait.NOT_CACHEABLE)


def _order(unique: dict[str, dict], key: str) -> tuple[int, str]:
    return (len(unique[key]["jobs"]) * -1, key)  # widely shared steps first


def swept_keys(jobs: list[dict[str, Any]]) -> list[str]:
    """The override keys whose value differs between jobs (what a results row shows)."""
    values: dict[str, set[str]] = {}
    for j in jobs:
        for ov in j["overrides"]:
            k, _, v = ov.partition("=")
            values.setdefault(k, set()).add(v)
    return [k for k, vs in values.items() if len(vs) > 1]


def rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    keys = swept_keys(summary["jobs"])
    out = []
    for j in summary["jobs"]:
        r = result_summary(j["record"]) if j["record"] else {}
        picked = {ov.partition("=")[0]: ov.partition("=")[2] for ov in j["overrides"]}
        out.append({"job": j["index"], **{k: picked.get(k, "") for k in keys},
                    "status": j["status"], "artifact": r.get("artifact"),
                    "size_bytes": r.get("size_bytes"), "cosine_mean": r.get("cosine_mean"),
                    "cosine_min": r.get("cosine_min"),
                    "latency_ms_median": r.get("latency_ms_median"),
                    "error": j.get("error")})
    return out


def write_results(summary: dict[str, Any], sweep_dir: Path) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    table = rows(summary)
    (sweep_dir / "results.json").write_text(json.dumps(table, indent=2))
    tmp = sweep_dir / f".results.{os.getpid()}.csv"
    with tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]) if table else ["job"])
        writer.writeheader()
        writer.writerows(table)
    tmp.replace(sweep_dir / "results.csv")
    (sweep_dir / "sweep.json").write_text(json.dumps(summary, indent=2))


def results_table(summary: dict[str, Any]) -> str:
    table = rows(summary)
    cols = [c for c in table[0] if c not in ("cosine_min", "error")] if table else []
    def cell(row: dict[str, Any], c: str) -> str:
        v = row[c]
        if v is None:
            return "-"
        if c == "size_bytes":
            return human_bytes(v)
        if isinstance(v, float):
            return f"{v:.4f}" if c.startswith("cosine") else f"{v:.1f}"
        return str(v)
    grid = [cols] + [[cell(r, c) for c in cols] for r in table]
    widths = [max(len(row[i]) for row in grid) for i in range(len(cols))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in grid]
    unique = summary["steps"]
    built = sum(s["action"] == "run" and s["status"] == "ok" for s in unique)
    failed = [j for j in summary["jobs"] if j["status"] != "ok"]
    cached = sum(s["action"] == "cached" for s in unique)
    elided = sum(s["action"] == "elided" for s in unique)
    lines += ["", (f"Sweep: {len(summary['jobs'])} jobs, {len(unique)} unique steps "
                   f"({built} run, {cached} cached, {elided} elided), {len(failed)} failed, "
                   f"in {summary['wall_s']:.1f} s.")]
    lines += [f"  job {j['index']} failed: {j['error']}" for j in failed]
    lines.append(f"Results: {summary['sweep_dir']}/results.csv")
    return "\n".join(lines) + "\n"
