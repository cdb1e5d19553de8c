"""Running a plan.

* Where a step is scheduled: `stepdag.py`, the step DAG and the one `Scheduler` (for a single
  run, a merged sweep and Ray alike); executors/execution.py puts a plan or a sweep into it
  and turns the outcomes into run records (`records.py`) and published outputs.
* Where a step runs: a runner (`outcome.py` says what one takes and returns; the local one is
  in executors/local.py, Ray's in executors/ray/runner.py) calls `wrapper.execute_step`: the
  store, or a build through the step wrapper `apply_step` (requires checked, the op's module
  in executors/steps/ run, ensures observed by `checkers.py`, facts stamped). Heavy steps run
  in other processes: warm workers (`workers.py`) forked by the fork server (`forkserver.py`).
* Around them: interrupts, memory and time monitoring, proof memos.
"""
