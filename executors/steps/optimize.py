"""optimize{flags}: the normalize fixed point, the named ONNX Runtime transformer fusions, then
the normalize fixed point again. Normalizing first is what the op declares it prepares on its
input (planner/core/ops.py), so a normalize step before it is elided (absorbed-elision); on an
already normalized input the first fixed point costs one pass that changes nothing. normalize
is this code path with no flags (executors/steps/normalize.py).

matmul_add is ORT's MatMulAddFusion, part of the basic level, so normalize already applies it
(executors/runtime/ortopt.py holds the fusions and what each creates)."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx

from executors.onnx.artifacts import MODEL, load, save
from executors.onnx.static_ifs import fold_static_ifs
from executors.run.step_api import StepContext, StepResult
from executors.runtime.ortopt import (
    FUSED_OPS,
    FUSION_OPTION,
    basic_fixed_point,
    fuse,
    needs_weights,
    save_fixed_point,
)
from executors.store.weights import internalize, matmul_weights
from planner.core.ops import FUSIONS

SHOWN = sorted({kind for kinds in FUSED_OPS.values() for kind in kinds})


@dataclass
class FixedPoints:
    """What optimizing a model did: its node counts, and the ORT passes that changed it."""

    nodes_before: int
    normalized: Counter[str]  # node count by op type at the first fixed point
    after: Counter[str]       # node count by op type of the output
    passes_to_normalize: int
    passes_after_fusion: int  # 0: no fusion ran, or none needed another fixed point


def run(ctx: StepContext) -> StepResult:
    flags = ctx.params["flags"]
    unknown = [f for f in flags if f not in FUSIONS]
    if unknown:
        raise ctx.fail(f"unsupported fusion flag(s) {unknown}",
                       f"use optim.flags from {list(FUSIONS)}")
    done = optimize(ctx, flags)
    before, after = done.normalized, done.after
    return StepResult(metrics={
        "fused_ops": {kind: after[kind] - before[kind] for kind in SHOWN
                      if after[kind] != before[kind]},
        "nodes_before": done.nodes_before, "nodes_normalized": sum(before.values()),
        "nodes_after": sum(after.values()), "ort_passes_to_normalize": done.passes_to_normalize,
        "ort_passes_to_fixed_point": done.passes_after_fusion})


def optimize(ctx: StepContext, flags: list[str]) -> FixedPoints:
    """The step's input brought to ORT's basic fixed point, the fusions `flags` name applied
    to it (none: it is normalized, and that is all), and saved as the step's model."""
    src = ctx.input_model()
    model = load(src, external=False)  # ORT reads the weights from their files
    nodes_before = len(model.graph.node)
    work = ctx.out / ".work"
    work.mkdir()
    if fold_static_ifs(model):  # before ORT, whose passes keep a dead branch ORT cannot check
        save(model, work / "folded.onnx", base=src.parent)
        src = work / "folded.onnx"
    normalized, first = basic_fixed_point(model, work, src=src, internal=False)
    del model
    before = Counter(n.op_type for n in normalized.graph.node)
    result, passes = _fuse(normalized, flags, work) if flags else (normalized, 0)
    after = Counter(n.op_type for n in result.graph.node)
    save_fixed_point(result, ctx.out / MODEL, base=work)  # unchanged weights linked, not read
    shutil.rmtree(work)
    return FixedPoints(nodes_before, before, after, first, passes)


def _fuse(normalized: onnx.ModelProto, flags: list[str],
          work: Path) -> tuple[onnx.ModelProto, int]:
    """The fusions `flags` name, then the basic fixed point again if any fusion ran."""
    # the fusions read the graph and small constants; attention also the Q, K, V weights
    skip = frozenset() if needs_weights(flags) else matmul_weights(normalized)
    internalize(normalized, work, skip=skip)
    fused = fuse(normalized, flags)  # no transformer flag: optimize{flags} is exactly normalize
    return basic_fixed_point(fused, work, internal=False) \
        if any(FUSION_OPTION[f] for f in flags) else (normalized, 0)
