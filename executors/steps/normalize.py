"""normalize: ONNX Runtime basic optimizations to a fixed point, then shape inference."""

from __future__ import annotations

from executors.artifacts import MODEL, load, save
from executors.base import StepContext, StepResult
from executors.ortopt import basic_fixed_point


def run(ctx: StepContext) -> StepResult:
    model = load(ctx.input_model(), external=False)  # ORT reads the weights from their files
    before = len(model.graph.node)
    work = ctx.out / ".work"
    work.mkdir()
    result, passes = basic_fixed_point(model, work)
    work.rmdir()
    save(result, ctx.out / MODEL)
    return StepResult(metrics={"nodes_before": before, "nodes_after": len(result.graph.node),
                               "ort_passes_to_fixed_point": passes})
