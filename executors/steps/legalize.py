"""legalize{target}: rewrite what the target rejects or computes wrongly, with the rewrite set
its declaration names (for QNN HTP, executors/onnx/htp_rewrites.py: mask constants floored,
Wheres made arithmetic, the Erf GELU folded, ReduceL2, Reciprocal, Softplus, CumSum, Einsum,
Col2Im and GatherND on constant indices lowered, pooling forms HTP gets wrong rewritten, empty
Concat inputs dropped, shared weights unshared, batch-1 constants tiled, Muls by ones dropped),
then check nothing it rejects is left: an op the target has no builder for fails the step naming
the node, its module and the fix. The fp32 outputs on real (non-padding) tokens must not
change."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors.onnx.artifacts import MODEL, load, save
from executors.onnx.iospecs import io_specs
from executors.onnx.legality import rewrite_set
from executors.run.step_api import StepContext, StepResult
from executors.runtime.adapters import host_providers
from executors.samples import batches, valid_positions

# how far legalization may move each output on real tokens: of its own peak where over 1
# (fused ops reorder float arithmetic: a tiny Moonshine encoder's outputs peak at 4.1 and moved
# by 1.7e-4 through its fused GELUs)
TOLERANCE = 1e-4


def run(ctx: StepContext) -> StepResult:
    path = ctx.input_model()
    rewrites = rewrite_set(ctx.params["target"])
    if rewrites is None:
        raise ctx.fail(f"target {ctx.params['target']} declares no legalizer to run",
                       "declare its legalizer in planner/core/targets.py")
    model = load(path)
    done: dict[str, int] = {}
    for name, rewrite in rewrites.REWRITES:
        result = rewrite(model)
        if isinstance(result, tuple):
            model, result = result
        done[name] = result
    left = rewrites.violations(model)
    if left:
        more = f" (+{len(left) - 1} more)" if len(left) > 1 else ""
        raise ctx.fail(f"{left[0]} remains after legalization{more}",
                       rewrites.remedy(model))
    save(model, ctx.out / MODEL)
    del model  # the weights: the output check below runs two sessions of its own
    max_abs = _outputs_unchanged(ctx, path)
    return StepResult(metrics={"rewrites": {k: v for k, v in done.items() if v},
                               "wheres_rewritten": done.get("mask_wheres", 0),
                               "constants_clamped": done.get("clamp_constants", 0),
                               "gelus_fused": done.get("erf_gelu", 0),
                               "max_abs_valid_tokens": max_abs,
                               "floor": rewrites.FLOOR})


def _outputs_unchanged(ctx: StepContext, before: Any) -> float:
    import onnxruntime as ort

    specs, _ = io_specs(before)
    moves: list[tuple[float, float]] = []  # (largest change, peak) of each output and feed
    so = ort.SessionOptions()
    so.log_severity_level = 3
    # numerics only: the input is at the basic fixed point, and ORT 1.32's extended level
    # fails on some graphs its basic level wrote ("Attempt to replace the existing tensor")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.add_session_config_entry("session.disable_prepacking", "1")  # two models: no packed copies
    feeds = batches(specs, 2, "verify", seed=7)
    # one session at a time: the input's outputs first, then the output's (one copy of the
    # weights in memory, not two)
    old = ort.InferenceSession(str(before), so, providers=host_providers())
    expected = [old.run(None, feed) for feed in feeds]
    del old
    new = ort.InferenceSession(str(ctx.out / MODEL), so, providers=host_providers())
    for feed, want in zip(feeds, expected, strict=True):
        valid = valid_positions(feed)
        for a, b in zip(want, new.run(None, feed), strict=True):
            diff, size = np.abs(a - b), np.abs(a)
            if valid is not None and diff.ndim >= 2 and diff.shape[:2] == valid.shape:
                diff, size = diff[valid], size[valid]
            moves.append((float(diff.max(initial=0.0)), float(size.max(initial=0.0))))
    # each output judged at its own peak; a NaN is not within
    over = [(moved, top) for moved, top in moves if not moved <= TOLERANCE * max(1.0, top)]
    if over:
        moved, top = over[0]
        raise ctx.fail(f"legalization changed outputs on real tokens by {moved:.3g} "
                       f"(tolerance {TOLERANCE * max(1.0, top):.3g}: {TOLERANCE} of the "
                       f"output's peak {top:.3g}, at least {TOLERANCE})", "report this model")
    return max((moved for moved, _ in moves), default=0.0)
