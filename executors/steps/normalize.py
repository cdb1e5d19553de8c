"""normalize: ONNX Runtime basic optimizations to a fixed point, then shape inference."""

from __future__ import annotations

import shutil

from executors.onnx.artifacts import MODEL, load
from executors.onnx.ortopt import basic_fixed_point, save_fixed_point
from executors.run.wrapper import StepContext, StepResult


def run(ctx: StepContext) -> StepResult:
    src = ctx.input_model()
    model = load(src, external=False)  # ORT reads the weights from their files
    before = len(model.graph.node)
    work = ctx.out / ".work"
    work.mkdir()
    result, passes = basic_fixed_point(model, work, src=src, internal=False)
    save_fixed_point(result, ctx.out / MODEL, base=work)  # its weights linked, not read
    shutil.rmtree(work)
    return StepResult(metrics={"nodes_before": before, "nodes_after": len(result.graph.node),
                               "ort_passes_to_fixed_point": passes})
