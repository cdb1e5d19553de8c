"""A plan's run and a sweep's, for every executor: the executor plugin opens its runner, and
these put the plan (or every job's plan, merged) into one step DAG, schedule it
(executors/run/stepdag.py), and turn the outcomes into run records (executors/run/records.py),
published outputs and a sweep's results files. The store's gc keeps every key while it runs;
the first Ctrl-C or SIGTERM stops the running steps and still writes the records.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from executors.publish import outputs as publish
from executors.run import forkserver, interrupts, records
from executors.run.outcome import Runner, StepOutcome
from executors.run.stepdag import Job, Scheduler, StepDag
from executors.store.content import Store
from executors.store.lease import Lease
from planner.core import memory, module_perf
from planner.core.sweep import SweepPlan
from planner.errors import PlanError, RunInterrupted
from planner.render.results import csv_text, rows


def check_modules(irs: list[dict[str, Any]], store: Store) -> None:
    """Before anything is built: a module perf.module or quant.overrides names whose export is
    not in the store yet is checked on a forward pass of the model with random weights (its
    module tree, as the export traces it). A model that cannot be traced here is left to the
    extract or quantize step, which checks again."""
    seen: set[str] = set()
    for ir in irs:
        wanted = module_perf.unchecked_modules(ir, store.root)
        if not wanted or ir["config_digest"] in seen:
            continue
        seen.add(ir["config_digest"])
        trees = _module_trees(ir["config"])
        for graph, named in wanted.items():
            for where, spec in named if graph in trees else []:
                problem = module_perf.module_error(spec, trees[graph], where)
                if problem:
                    raise PlanError(problem)


def check_op_types(irs: list[dict[str, Any]]) -> None:
    """Before anything is built: every op type quant.overrides names is one ONNX or ONNX
    Runtime knows (any domain: the graph a quantize step reads holds ORT's fused ops too)."""
    named = [(f"quant.overrides.{i}.{key}", op_type)
             for ir in irs for s in ir["steps"]
             for i, rule in enumerate(s["params"].get("overrides") or [])
             for key in ("op_types", "except_op_types") for op_type in rule.get(key, [])]
    if not named:
        return
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

    from planner.support.suggest import did_you_mean

    known = sorted({schema.name for schema in get_all_operator_schema()})
    for where, op_type in named:
        if op_type not in known:
            raise PlanError(f"{where}={op_type}: no ONNX or ONNX Runtime op is named "
                            f"{op_type}{did_you_mean(op_type, known)}; name op types as the "
                            "graph has them (MatMul, Gemm, Gelu, LayerNormalization, ...)")


def _module_trees(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The module tree of each graph the config exports; none if it cannot be traced here."""
    from executors.commands.hierarchy_trace import module_trees
    from planner.render.model_info import describe

    try:
        return module_trees(describe(config), config)
    except Exception:  # noqa: BLE001 - the extract step still checks the name
        return {}


def _budget(irs: list[dict[str, Any]]) -> int | None:
    """The memory the steps of a merged sweep may expect to use side by side: the smallest of
    its jobs' limits (run.max_memory, else this machine's available memory now)."""
    limits = [got for ir in irs if (got := memory.limit(ir["config"])[0]) is not None]
    return min(limits, default=None)


def run_plan(executor: str, store: Store, runner: Runner, ir: dict[str, Any],
             outputs_dir: Path | None, overrides: list[str], say: Any) -> dict[str, Any]:
    """One plan (a DAG of one job): its run record, published to `outputs_dir` and saved."""
    check_op_types([ir])
    check_modules([ir], store)
    started, t0 = time.time(), time.perf_counter()
    dag = StepDag([(0, ir)])
    with interrupts.handling(forkserver.kill_all), Lease(store.root) as lease:
        lease.hold(dag.nodes)  # store gc keeps them
        stage = publish.staging_dir(outputs_dir) if outputs_dir else None
        scheduler = Scheduler(dag, runner, say, lambda _key, _step: stage, lease.hold,
                              budget=memory.limit(ir["config"])[0])
        signal_name = None
        try:
            scheduler.run()
        except interrupts.Interrupted as stop:
            signal_name = stop.name
            for key in scheduler.stopped:
                say(f"      {dag.nodes[key]['step']['id']}: interrupted by {stop.name}; its "
                    "temporary output was removed")
        return job_record(executor, store, dag.jobs[0], scheduler.outcomes, outputs_dir,
                          overrides, started, say, wall_s=time.perf_counter() - t0,
                          stopped=(signal_name, scheduler.stopped), staging=stage)


def run_sweep(executor: str, store: Store, runner: Runner, sweep: SweepPlan, sweep_dir: Path,
              say: Any) -> dict[str, Any]:
    """Every job's plan merged into one DAG: each unique key built once, one failing step
    stopping only the jobs that need it. The sweep's summary, also written to `sweep_dir`."""
    check_op_types([j.ir for j in sweep.jobs if j.ir is not None])
    check_modules([j.ir for j in sweep.jobs if j.ir is not None], store)
    started, t0 = time.time(), time.perf_counter()
    dag = StepDag([(j.index, j.ir) for j in sweep.jobs if j.ir is not None])
    with interrupts.handling(forkserver.kill_all), Lease(store.root) as lease:
        lease.hold(dag.nodes)  # store gc keeps every key of the sweep while it runs
        scheduler = Scheduler(dag, runner, say,
                              lambda key, _step: sweep_dir / ".shared" / key[:12], lease.hold,
                              budget=_budget([j.ir for j in sweep.jobs if j.ir is not None]))
        try:
            outcomes = scheduler.run()
        except interrupts.Interrupted as stop:
            raise RunInterrupted(stop.signum, f"the sweep was interrupted by {stop.name}; the "
                                 "steps it finished are in the store: run it again to "
                                 "continue") from None
        jobs = [_job_result(executor, store, dag, job, outcomes, sweep_dir, started, say)
                for job in sweep.jobs]
    summary = {
        "format_version": 1, "sweep_dir": str(sweep_dir), "executor": executor,
        "wall_s": round(time.perf_counter() - t0, 3),
        "jobs": jobs,
        "steps": [{"key": k, "id": v["step"]["id"], "op": v["step"]["op"],
                   "action": outcomes[k].action if k in outcomes else "skipped",
                   "status": outcomes[k].status if k in outcomes else "skipped",
                   "jobs": v["jobs"]}
                  for k, v in dag.nodes.items()],
        "rewrites": [rw.record() for rw in sweep.merges],
    }
    write_results(summary, sweep_dir)
    return summary


def _job_result(executor: str, store: Store, dag: StepDag, job: Any,
                outcomes: dict[str, StepOutcome], sweep_dir: Path, started: float,
                say: Any) -> dict[str, Any]:
    out = {"index": job.index, "overrides": job.overrides}
    if job.plan is None:
        return {**out, "status": "failed", "error": job.error, "record": None}
    mine = dag.jobs[job.index]
    ended = max((outcomes[k].ended for k in mine.keys.values() if k in outcomes),
                default=started)
    record = job_record(executor, store, mine, outcomes, sweep_dir / job.name, job.overrides,
                        started, say, wall_s=ended - started, index=job.index)
    return {**out, "status": record["status"],
            "error": record["error"]["message"] if record["error"] else None,
            "record": record}


def job_record(executor: str, store: Store, job: Job, outcomes: dict[str, StepOutcome],
               out_dir: Path | None, overrides: list[str], started: float, say: Any,
               wall_s: float, index: int | None = None,
               stopped: tuple[str | None, list[str]] = (None, []),
               staging: Path | None = None) -> dict[str, Any]:
    """A job's run record from the DAG's outcomes, published to `out_dir` (if any) and saved
    in the store. `stopped`: the signal that interrupted the run and the keys it stopped;
    `staging`: where its uncached steps built their outputs (publish.staging_dir)."""
    signal_name, stopped_keys = stopped
    steps, out_dirs = [], {}
    for s in job.ir["steps"]:
        key, got = job.keys[s["id"]], outcomes.get(job.keys[s["id"]])
        if key in stopped_keys:
            steps.append(records.interrupted(s, key, signal_name or ""))
        elif got is None or got.status == "skipped":
            steps.append(records.skipped(s, key, "the run was interrupted" if signal_name
                                         and got is None else "an input step failed"))
        else:
            fields = got.record_fields()
            if s["id"] in job.proof_checks:  # elided in the plan, ran after all
                fields["proof_check"] = job.proof_checks[s["id"]]
            steps.append(records.step_record(s, key, **fields))
            if got.ok and got.action != "elided":
                out_dirs[s["id"]] = Path(got.path or "")
    record = records.run_record(
        job.ir, steps, executor=executor, store=store.root, started=started, wall_s=wall_s,
        overrides=list(overrides), deliverable=job.stand_in(job.ir["deliverable"], outcomes),
        outputs_dir=out_dir, job=index, interrupted_by=signal_name, say=say)
    if out_dir is not None:
        publish.outputs(record, out_dirs, out_dir, staging)
    if store.save_run(record) is None:
        say(f"could not keep the run record in the store {store.root} (is its disk full?); "
            "the run's outputs have their own copy")
    return record


def write_results(summary: dict[str, Any], sweep_dir: Path) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    table = rows(summary)
    (sweep_dir / "results.json").write_text(json.dumps(table, indent=2))
    tmp = sweep_dir / ".results.csv.tmp"
    tmp.write_text(csv_text(table))
    tmp.replace(sweep_dir / "results.csv")
    (sweep_dir / "sweep.json").write_text(json.dumps(summary, indent=2))
