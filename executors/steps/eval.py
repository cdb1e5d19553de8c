"""eval: the task's metric for PyTorch, the fp32 export and the deliverable on its target, on
a dataset read offline (or the shipped inputs), with a verdict against eval.max_drop
(executors/evaluation/). A regression is a result, cached like any other; the step wrapper
fails the run on it (the op's gate)."""

from __future__ import annotations

import json

from executors.evaluation.base import EvalDataError
from executors.evaluation.runner import evaluate
from executors.onnx.artifacts import METRICS
from executors.run.step_api import StepContext, StepResult


def run(ctx: StepContext) -> StepResult:
    try:
        metrics = evaluate(ctx.params, ctx.inputs, ctx.cache_dir, ctx.progress)
    except EvalDataError as exc:
        cause, _, fix = str(exc).partition("; ")
        raise ctx.fail(cause, fix or "fix eval.dataset", where=ctx.params["dataset"]) from exc
    (ctx.out / METRICS).write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return StepResult(metrics=metrics)
