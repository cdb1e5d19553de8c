"""normalize: ONNX Runtime basic optimizations to a fixed point, then shape inference; that is
optimize{} (executors/steps/optimize.py), run through its code path with no flags."""

from __future__ import annotations

from executors.run.step_api import StepContext, StepResult
from executors.steps.optimize import optimize


def run(ctx: StepContext) -> StepResult:
    done = optimize(ctx, [])
    return StepResult(metrics={"nodes_before": done.nodes_before,
                               "nodes_after": sum(done.after.values()),
                               "ort_passes_to_fixed_point": done.passes_to_normalize})
