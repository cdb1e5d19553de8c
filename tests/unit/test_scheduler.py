"""The one scheduler (executors/run/stepdag.py) on real plans with a runner that only records
what it is asked to run: the order, the slots, skipping after a failure, measurements last and
alone, a failed proof that re-keys what follows, an interrupt, a step no runner can run. The
real runners are exercised by the integration tests (local, sweeps, Ray)."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from executors.run import interrupts
from executors.run.interrupts import Interrupted
from executors.run.outcome import OK, UNELIDED, StepOutcome, Work, failed
from executors.run.stepdag import Scheduler, StepDag, measures
from planner.config.compose import compose
from planner.errors import PlanError
from planner.planning import plan_for

TINY_CPU = ["model=tiny_bert", "target=cpu", "quant=w8a16"]


def plan(*overrides: str) -> dict[str, Any]:
    return plan_for(compose([*TINY_CPU, *overrides])).to_json()


class Recorder:
    """A runner that finishes every step after `delay` s with the outcome `outcome_of` gives."""

    name = "recorder"

    def __init__(self, outcome_of: Any = None, slots: int = 1, delay: float = 0.0,
                 refuse: str | None = None) -> None:
        self.outcome_of = outcome_of or (lambda _w: None)
        self.slots, self.measure_slots, self.delay, self.refuse = slots, 1, delay, refuse
        self.started: list[Work] = []
        self.busy, self.most_busy, self.stopped = 0, 0, False
        self.lock = threading.Lock()

    def can_run(self, step: dict[str, Any]) -> bool:
        return step["op"] != self.refuse

    def start(self, work: Work) -> Future[StepOutcome]:
        self.started.append(work)
        got = self.outcome_of(work) or StepOutcome(status=OK, path=f"/store/{work.key}")
        with self.lock:
            self.busy += 1
            self.most_busy = max(self.most_busy, self.busy)
            if measures(work.step):  # a measurement runs alone
                assert self.busy == 1, [w.step["id"] for w in self.started]
        fut: Future[StepOutcome] = Future()

        def finish() -> None:
            with self.lock:
                self.busy -= 1
            fut.set_result(got)

        if self.delay:
            threading.Timer(self.delay, finish).start()
        else:
            finish()
        return fut

    def finished(self, work: Work, outcome: StepOutcome) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


def schedule(dag: StepDag, runner: Recorder) -> Scheduler:
    scheduler = Scheduler(dag, runner, lambda _line: None, lambda _k, _s: Path("/out"))
    scheduler.run()
    return scheduler


def test_every_key_runs_once_inputs_first_and_the_measurement_last() -> None:
    ir = plan()
    runner = Recorder()
    outcomes = schedule(StepDag([(0, ir)]), runner).outcomes
    ids = [w.step["id"] for w in runner.started]
    elided = [s["id"] for s in ir["steps"] if s["action"] == "elided"]
    assert sorted(ids) == sorted(s["id"] for s in ir["steps"])  # elided ones: to re-check
    assert ids[-1] == "perf" and set(elided) <= set(ids)
    for work in runner.started:
        for dep in work.inputs.values():
            assert dep.name in outcomes  # its inputs were done when it started
    assert all(o.ok for o in outcomes.values())


def test_a_failed_step_skips_what_reads_it_and_nothing_else() -> None:
    ir = plan()
    runner = Recorder(lambda w: failed("boom") if w.step["id"] == "quantize" else None)
    scheduler = schedule(StepDag([(0, ir)]), runner)
    status = {s["id"]: scheduler.outcomes[s["key"]].status for s in ir["steps"]}
    assert status["quantize"] == "failed"
    assert {status[i] for i in ("tag", "verify", "perf")} == {"skipped"}
    assert {status[i] for i in ("resolve", "export", "normalize")} == {"ok"}
    assert "tag" not in [w.step["id"] for w in runner.started]


def test_a_proof_that_does_not_hold_runs_the_step_and_rekeys_what_follows() -> None:
    ir = plan()
    planned = {s["id"]: s["key"] for s in ir["steps"]}

    def outcome(work: Work) -> StepOutcome | None:
        if work.step["action"] == "elided":
            return StepOutcome(status=UNELIDED, error="not normalized on the real input")
        return None

    runner = Recorder(outcome)
    dag = StepDag([(0, ir)])
    scheduler = schedule(dag, runner)
    job = dag.jobs[0]
    assert job.unelided == {"optimize"}
    assert job.proof_checks["optimize"] == {"held": False,
                                            "detail": "not normalized on the real input"}
    ran = [(w.step["id"], w.step["action"], w.key) for w in runner.started]
    assert ("optimize", "run", planned["optimize"]) in ran  # under its own key
    for sid in ("legalize", "quantize", "tag", "verify", "perf"):  # they read optimize now
        assert job.keys[sid] != planned[sid]
        assert scheduler.outcomes[job.keys[sid]].ok
        assert planned[sid] not in dag.nodes  # no job needs the planned key any more
    legalize = next(w for w in runner.started if w.step["id"] == "legalize")
    assert legalize.inputs["model"] == Path("/store") / planned["optimize"]
    # the progress labels count the plan's steps: a re-keyed step keeps its place
    labels = [dag.label(job.keys[s["id"]]) for s in ir["steps"]]
    assert labels == [f"[{i}/{len(ir['steps'])}]" for i in range(1, len(ir["steps"]) + 1)]


def test_a_sweep_runs_shared_keys_once_within_the_runners_slots() -> None:
    irs = [plan("quant=w8a8"), plan("quant=w8a16"), plan("quant=none")]
    dag = StepDag(list(enumerate(irs)))
    runner = Recorder(slots=2, delay=0.02)
    schedule(dag, runner)
    keys = [w.key for w in runner.started]
    assert len(keys) == len(set(keys)) == len(dag.nodes)
    assert runner.most_busy == 2
    export = next(k for k, v in dag.nodes.items() if v["step"]["id"] == "export")
    assert dag.nodes[export]["jobs"] == [0, 1, 2]


def test_an_interrupt_stops_the_runner_and_names_the_step_it_stopped() -> None:
    ir = plan()

    def outcome(work: Work) -> None:
        if work.step["id"] == "export":
            raise Interrupted(2)

    runner = Recorder(outcome)
    scheduler = Scheduler(StepDag([(0, ir)]), runner, lambda _l: None, lambda _k, _s: None)
    with pytest.raises(Interrupted):
        scheduler.run()
    export = next(s["key"] for s in ir["steps"] if s["id"] == "export")
    assert runner.stopped and scheduler.stopped == [export]
    assert export not in scheduler.outcomes


def test_an_interrupt_a_library_re_raised_plainly_is_still_the_signal_received() -> None:
    """Ray's waits check signals themselves: the handler's Interrupted comes back as a plain
    KeyboardInterrupt, which the scheduler must treat as the same interrupt (SIGTERM here)."""
    ir = plan()

    def outcome(work: Work) -> None:
        if work.step["id"] == "export":
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises Interrupted ...
            time.sleep(1)

    def plain(work: Work) -> None:
        try:
            outcome(work)
        except Interrupted:
            raise KeyboardInterrupt from None  # ... which the library turns into this

    runner = Recorder(plain)
    scheduler = Scheduler(StepDag([(0, ir)]), runner, lambda _l: None, lambda _k, _s: None)
    with interrupts.handling(lambda: None), pytest.raises(Interrupted) as stop:
        scheduler.run()
    assert stop.value.name == "SIGTERM"
    assert runner.stopped and len(scheduler.stopped) == 1


def test_a_step_the_runner_cannot_run_is_refused_before_anything_runs() -> None:
    runner = Recorder(refuse="quantize")
    with pytest.raises(PlanError, match="cannot run step.s. quantize"):
        schedule(StepDag([(0, plan())]), runner)
    assert runner.started == []
