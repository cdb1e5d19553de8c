"""optimize{flags}: the named ONNX Runtime transformer fusions, then the normalize fixed point.

matmul_add is ORT's MatMulAddFusion, part of the basic level, so normalize already applies it
(executors/ortopt.py holds the fusions and what each creates)."""

from __future__ import annotations

from collections import Counter

from executors.artifacts import MODEL, load, load_for_rewrite, save
from executors.base import StepContext, StepResult
from executors.ortopt import FUSED_OPS, basic_fixed_point, fuse, needs_weights
from planner.ops import FUSIONS

SHOWN = sorted({kind for kinds in FUSED_OPS.values() for kind in kinds})


def run(ctx: StepContext) -> StepResult:
    flags = ctx.params["flags"]
    unknown = [f for f in flags if f not in FUSIONS]
    if unknown:
        raise ctx.fail(f"unsupported fusion flag(s) {unknown}",
                       f"use optim.flags from {list(FUSIONS)}")
    model = load(ctx.input_model()) if needs_weights(flags) else load_for_rewrite(ctx.input_model())
    before = Counter(n.op_type for n in model.graph.node)
    fused = fuse(model, flags)  # no transformer flag: optimize{flags} is exactly normalize
    work = ctx.out / ".work"
    work.mkdir()
    result, passes = basic_fixed_point(fused, work)
    work.rmdir()
    after = Counter(n.op_type for n in result.graph.node)
    save(result, ctx.out / MODEL)
    return StepResult(metrics={
        "fused_ops": {kind: after[kind] - before[kind] for kind in SHOWN
                      if after[kind] != before[kind]},
        "nodes_before": sum(before.values()), "nodes_after": sum(after.values()),
        "ort_passes_to_fixed_point": passes})
