"""The step DAG and the one scheduler: every executor runs every plan through `Scheduler`, for a
single run (a sweep of one job), a merged sweep and Ray alike.

A `StepDag` holds each unique key once (`nodes`: key -> {step, jobs}), what it reads (`deps`:
key -> role -> key) and each job's plan. `Scheduler.run` starts ready steps on a runner
(executors/run/outcome.py: the local warm workers, or Ray tasks), longest remaining path first,
and measurements (perf) last, when nothing else runs; a step does not start beside others when
their expected peaks and its own would pass the run's memory budget. Here and nowhere else: a step whose input
failed is skipped, and so is a measurement of a job whose gate (verify, eval) failed; an elided step is re-checked on its real input (the proof's premises), and
if they do not hold the step runs after all and the jobs that read it are re-keyed
(`StepDag.unelide`); an interrupt ends the running steps through the runner (`Scheduler.run`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executors.run.interrupts import caught
from executors.run.outcome import UNELIDED, Runner, StepOutcome, Work, skipped
from planner.core.keys import content_key
from planner.core.ops import OPS, Trait
from planner.errors import PlanError

Unique = dict[str, dict[str, Any]]
Deps = dict[str, dict[str, str]]      # key -> role -> key of the step that input names


def dependencies(unique: Unique, ids: dict[int, dict[str, str]]) -> Deps:
    """role -> key of the step each input names, within the job the step came from."""
    return {k: {role: ids[v["jobs"][0]][src] for role, src in v["step"]["inputs"].items()}
            for k, v in unique.items()}


def measures(step: dict[str, Any]) -> bool:
    """A step that measures this machine: it runs alone, after everything else is built."""
    return OPS[step["op"]].has(Trait.NOT_CACHEABLE)


def widest_first(unique: Unique, key: str) -> tuple[int, str]:
    return (len(unique[key]["jobs"]) * -1, key)  # widely shared steps first


def longest_path_first(unique: Unique, deps: Deps) -> Callable[[str], tuple[int, int, str]]:
    """A sort key for ready steps: the longest chain of builds still to come after the step
    first (the critical path), then the widest shared, then by key. Measurements do not
    count: they run last, on their own."""
    consumers: dict[str, list[str]] = {k: [] for k in unique}
    for key, inputs in deps.items():
        for dep in set(inputs.values()):
            consumers[dep].append(key)
    length: dict[str, int] = {}

    def remaining(key: str) -> int:
        if key not in length:
            step = unique[key]["step"]
            own = int(step["action"] == "run" and not measures(step))
            length[key] = own + max((remaining(c) for c in consumers[key]), default=0)
        return length[key]

    for key in topological(unique, deps)[::-1]:  # sinks first: no deep recursion
        remaining(key)
    return lambda key: (-length[key], *widest_first(unique, key))


def topological(unique: Unique, deps: Deps) -> list[str]:
    """Every key after the keys it depends on; measurements last; shared steps first."""
    done: list[str] = []
    placed: set[str] = set()
    pending = sorted(unique, key=lambda k: (measures(unique[k]["step"]), widest_first(unique, k)))
    while pending:
        ready = [k for k in pending if all(d in placed for d in deps[k].values())]
        if not ready:
            raise PlanError("the merged DAG has a cycle or a missing input; this is a "
                            "modelplan bug: report the overrides that planned it")
        done.extend(ready)
        placed.update(ready)
        pending = [k for k in pending if k not in placed]
    builds = [k for k in done if not measures(unique[k]["step"])]
    return builds + [k for k in done if measures(unique[k]["step"])]


@dataclass
class Job:
    """One plan of the DAG: the key each of its steps is built under now (its planned key,
    until a proof that fails on a real input re-keys what follows it)."""

    index: int
    ir: dict[str, Any]
    keys: dict[str, str] = field(default_factory=dict)
    unelided: set[str] = field(default_factory=set)
    proof_checks: dict[str, dict[str, Any]] = field(default_factory=dict)  # by step id

    def __post_init__(self) -> None:
        self.keys = {s["id"]: s["key"] for s in self.ir["steps"]}

    def inputs(self, step: dict[str, Any]) -> dict[str, str]:
        """role -> the step id it reads now: the elided step itself once it ran after all."""
        via = step.get("via", {})
        return {role: via[role] if via.get(role) in self.unelided else src
                for role, src in step["inputs"].items()}

    def stand_in(self, step_id: str, outcomes: dict[str, StepOutcome]) -> str:
        """The step whose output an elided step's readers get (the deliverable, if elided)."""
        steps = {s["id"]: s for s in self.ir["steps"]}
        while (got := outcomes.get(self.keys[step_id])) is not None and got.action == "elided":
            step_id = self.inputs(steps[step_id])[OPS[steps[step_id]["op"]].chain_role]
        return step_id


class StepDag:
    def __init__(self, plans: list[tuple[int, dict[str, Any]]]) -> None:
        self.jobs = {index: Job(index, ir) for index, ir in plans}
        self.nodes: Unique = {}
        self.deps: Deps = {}
        for job in self.jobs.values():
            for s in job.ir["steps"]:
                self._add(job, s)
        self.order = list(self.nodes)  # for progress labels: plan order, job by job

    def _add(self, job: Job, step: dict[str, Any]) -> str:
        """Add a job's step under its current key. A step one job elides and another runs is
        run: an absorbed elision's output is not its input (its readers read past it)."""
        key = job.keys[step["id"]]
        node = self.nodes.setdefault(key, {"step": step, "jobs": []})
        node["jobs"].append(job.index)
        if node["step"]["action"] == "elided" and step["action"] != "elided":
            node["step"] = step
        self.deps.setdefault(key, {r: job.keys[src] for r, src in job.inputs(step).items()})
        return key

    def label(self, key: str) -> str:
        if key not in self.order:
            self.order.append(key)
        return f"[{self.order.index(key) + 1}/{len(self.nodes)}]"

    def unelide(self, key: str, detail: str) -> None:
        """The premises of an elided step do not hold on its real input: it runs after all,
        under its own key (its inputs are unchanged), and every job that has it re-keys what
        follows (their readers read it now, not past it)."""
        node = self.nodes[key]
        node["step"] = {**node["step"], "action": "run"}
        for index in list(node["jobs"]):
            job = self.jobs[index]
            ids = [s["id"] for s in job.ir["steps"] if job.keys[s["id"]] == key]
            job.unelided.update(ids)
            job.proof_checks.update({i: {"held": False, "detail": detail} for i in ids})
            self._rekey(job)

    def _rekey(self, job: Job) -> None:
        for s in job.ir["steps"]:  # plan order: inputs first
            planned = {r: s_key(job.ir, src) for r, src in s["inputs"].items()}
            actual = {r: job.keys[src] for r, src in job.inputs(s).items()}
            key = s["key"] if actual == planned else \
                content_key(s["op"], s["params"], actual, job.ir["tools"])
            old = job.keys[s["id"]]
            if key == old:
                continue
            self.nodes[old]["jobs"].remove(job.index)
            if not self.nodes[old]["jobs"]:  # no job needs it any more: its label is the new
                del self.nodes[old], self.deps[old]  # key's, which counts no extra step
                if old in self.order and key not in self.order:
                    self.order[self.order.index(old)] = key
                elif old in self.order:  # another job's step has the new key's label
                    self.order.remove(old)
            job.keys[s["id"]] = key
            self._add(job, s)


def expected_peak(step: dict[str, Any]) -> int:
    """The bytes a step is expected to use at its peak when it runs (0: the plan has no
    estimate, or it only re-checks an elision)."""
    return (step.get("memory") or {}).get("peak", 0) if step["action"] != "elided" else 0


def s_key(ir: dict[str, Any], step_id: str) -> str:
    return next(s["key"] for s in ir["steps"] if s["id"] == step_id)


class Scheduler:
    """Runs every unique key of a DAG once, inputs first, on a runner. `out_dir(key, step)`:
    where a step that the store does not keep writes its output. After an interrupt (raised
    from `run`, the runner's steps stopped), `outcomes` has what was done and `stopped` the
    keys that were running."""

    def __init__(self, dag: StepDag, runner: Runner, say: Callable[[str], None],
                 out_dir: Callable[[str, dict[str, Any]], Path | None],
                 hold: Callable[[Any], None] = lambda _keys: None,
                 budget: int | None = None) -> None:
        self.dag, self.runner, self.say, self.out_dir = dag, runner, say, out_dir
        self.hold = hold  # keys the store's gc must keep (a re-keyed job's new ones)
        self.budget = budget  # bytes the steps running side by side may expect to use
        self.outcomes: dict[str, StepOutcome] = {}
        self.running: dict[Future[StepOutcome], tuple[str, Work]] = {}
        self.pending = set(dag.nodes)
        self.stopped: list[str] = []
        self._starting: str | None = None
        self._turns = 0

    def run(self) -> dict[str, StepOutcome]:
        cannot = sorted({v["step"]["id"] for v in self.dag.nodes.values()
                         if v["step"]["action"] != "elided" and not self.runner.can_run(v["step"])})
        if cannot:
            raise PlanError(f"the {self.runner.name} runner cannot run step(s) "
                            f"{', '.join(cannot)} (an op or execution provider it lacks); "
                            "nothing was run")
        first = longest_path_first(self.dag.nodes, self.dag.deps)
        try:
            while self.pending or self.running:
                if self._start_ready(first):  # skipped: what that frees may be ready
                    continue
                if self.running:
                    if self._collect():
                        first = longest_path_first(self.dag.nodes, self.dag.deps)
                elif self.pending:
                    raise PlanError("the step DAG has a cycle or a missing input; this is a "
                                    "modelplan bug: report the overrides that planned it")
        except KeyboardInterrupt as exc:  # as Ray re-raises it too: see interrupts.caught
            self.runner.stop()
            self.stopped = [key for key, _work in self.running.values()]
            if self._starting is not None:
                self.stopped.append(self._starting)
            raise caught(exc) from None
        return self.outcomes

    def _start_ready(self, first: Callable[[str], Any]) -> int:
        """Start what is ready, within the runner's slots: proofs to re-check and builds
        first; measurements only when no build is left, at most `measure_slots` at once. How
        many steps were skipped here (an input failed) without the runner."""
        settled = 0
        dag, outcomes = self.dag, self.outcomes
        builds = {k for k in self.pending if not measures(dag.nodes[k]["step"])}
        measuring = not builds and all(measures(w.step) for _k, w in self.running.values())
        slots = self.runner.measure_slots if measuring else self.runner.slots
        ready = sorted(self.pending if measuring else builds, key=lambda k: (
            dag.nodes[k]["step"]["action"] != "elided", first(k)))  # proofs first: cheap
        for key in ready:
            deps = dag.deps[key]
            if not all(d in outcomes for d in deps.values()):
                continue
            step = dag.nodes[key]["step"]
            why = "an input step failed" if any(not outcomes[d].ok for d in deps.values()) \
                else self._failed_gate(key) if measures(step) else None
            if why:
                self.say(f"{dag.label(key)} {step['id']:<10} skipped ({why})")
                outcomes[key] = _ended(skipped(why))
                self.pending.discard(key)
                settled += 1
                continue
            inputs = {role: Path(outcomes[d].path or "") for role, d in deps.items()}
            if len(self.running) >= slots:
                break
            if not self.fits(step):
                continue  # a smaller ready step may fit beside the running ones
            self.pending.discard(key)
            turn, self._turns = self._turns, self._turns + measures(step)
            work = Work(step, key, inputs, self.out_dir(key, step), dag.label(key), turn)
            self._starting = key  # a runner may run it inline, within start()
            self.running[self.runner.start(work)] = (key, work)
            self._starting = None
        return settled

    def fits(self, step: dict[str, Any]) -> bool:
        """Whether `step` may start now: nothing runs, or the running steps' expected peaks
        and its own stay within the budget (the plan's estimates, planner/core/memory.py)."""
        if self.budget is None or not self.running:
            return True
        in_use = sum(expected_peak(w.step) for _k, w in self.running.values())
        return in_use + expected_peak(step) <= self.budget

    def _failed_gate(self, key: str) -> str | None:
        """Why a measurement is not worth running: every job it measures had a gate step fail,
        so what it would time is not delivered."""
        failed = []
        for index in self.dag.nodes[key]["jobs"]:
            job = self.dag.jobs[index]
            gates = [s["id"] for s in job.ir["steps"] if OPS[s["op"]].has(Trait.GATE)
                     and (got := self.outcomes.get(job.keys[s["id"]])) is not None
                     and not got.ok]
            if not gates:
                return None
            failed.append(gates[0])
        return f"{failed[0]} failed: the deliverable it would measure is not delivered"

    def _collect(self) -> bool:
        """Take the outcomes of the steps that ended. True if a failed proof re-keyed the DAG:
        the elided step runs after all (under its own key) and what follows it re-keys."""
        done, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
        rekeyed = False
        for fut in done:
            key, work = self.running.pop(fut)
            outcome = _ended(fut.result())
            name = f"{work.label} {work.step['id']:<10}"
            if outcome.status == UNELIDED:
                self.say(f"{name} proof did not hold ({outcome.error}); running it")
                self.dag.unelide(key, outcome.error or "")
                self.hold(list(self.dag.nodes))
                running = {k for k, _w in self.running.values()}
                self.pending = {k for k in self.dag.nodes
                                if k not in self.outcomes and k not in running}
                rekeyed = True
                continue
            self.outcomes[key] = outcome
            if outcome.action == "elided":
                self.say(f"{name} elided ({(outcome.proof_check or {}).get('detail')})")
            elif not outcome.ok:  # the error itself is the run's, printed once at its end
                self.say(f"      {work.step['id']}: FAILED")
            self.runner.finished(work, outcome)
        return rekeyed


def _ended(outcome: StepOutcome) -> StepOutcome:
    outcome.ended = time.time()
    return outcome
