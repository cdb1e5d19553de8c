"""verify: run the candidate (on the target's EP) and the fp32 reference (on CPU) on real
inputs; cosine per token vector and max-abs error on real (non-padding) tokens only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from executors.onnx.artifacts import METRICS, read_facts
from executors.onnx.iospecs import io_specs
from executors.run.step_api import StepContext, StepResult
from executors.runtime.adapters import adapter
from executors.samples import Samples, valid_positions
from planner.core.diagnosis import VERDICTS
from planner.core.targets import of_params, reference

HINT = ("use quant=w8a16_pc (w8a16 per-channel keeps transformers accurate), or lower "
        "verify.threshold if this accuracy is acceptable")
# a graph whose activations are already 16-bit: the modules that lose the most go up a rung
RAISE_HINT = ("raise the precision of the modules that lose the most (quant.search=auto, or "
              "quant.overrides), raise quant.calibration.headroom if inputs pass the calibrated "
              "ranges (a decode graph calibrates on a token a sample), use quant=w8a16_pc if "
              "this build's weights are per-tensor, or lower verify.threshold if this accuracy "
              "is acceptable")
EXPORT_HINT = ("the graph is float32 as PyTorch is, so no quant setting mends this: the "
               "export of this model type differs from PyTorch (a bug worth reporting with "
               "its config.json), or lower verify.threshold if this accuracy is acceptable")


# float16's smallest step: the finest an HTP activation (16-bit at most) resolves
RESOLVED = float(np.finfo(np.float16).smallest_subnormal)


def degenerate_hint(peak: float) -> str:
    return (f"the reference is degenerate: its outputs peak at {peak:.3g}, below what the "
            f"target's activations resolve (float16's smallest step is {RESOLVED:.3g}), so no "
            "quant setting can match it; the weights look untrained (random): build the model "
            "with its real weights, or set verify=none to skip the comparison")


def hint(candidate: Path, reference_peak: float | None = None) -> str:
    """The fix a failed comparison suggests: raise a quantized graph's precision (its modules'
    where its activations are 16-bit already, as w8a16_pc's are); an fp32
    graph's difference is an export bug, which no other `quant` mends; a reference whose
    outputs are all but zero (untrained weights) is no yardstick at any precision."""
    facts = read_facts(candidate) or {}
    precision = (facts.get("precision") or {}).get("value", "fp32")
    if precision == "fp32":
        return EXPORT_HINT
    if reference_peak is not None and reference_peak < RESOLVED:
        return degenerate_hint(reference_peak)
    return RAISE_HINT if str(precision).partition("+")[0].endswith("a16") else HINT


def candidate_session(ctx: StepContext):
    p = ctx.params
    target = of_params(p)
    return adapter(target).step_session(ctx.input_model("candidate"), target,
                                        p["provider_options"], ctx.cache_dir)[0]


def vectors(got: np.ndarray, want: np.ndarray,
            valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """What cosine compares: per real token for token outputs ([batch, seq, ...] matching the
    attention mask), else one flattened vector per batch element."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    if valid is not None and got.ndim >= 3 and got.shape[:2] == valid.shape:
        got, want = got[valid], want[valid]
        return got.reshape(len(got), -1), want.reshape(len(want), -1)
    batch = got.shape[0] if got.ndim > 1 else 1
    return got.reshape(batch, -1), want.reshape(batch, -1)


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Row-wise cosine; two all-zero rows agree (1.0), one all-zero row does not (0.0)."""
    num = (got * want).sum(-1)
    norms = np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1)
    both_zero = ~np.any(got != 0, axis=-1) & ~np.any(want != 0, axis=-1)
    return np.where(both_zero, 1.0, num / np.maximum(norms, np.finfo(np.float64).tiny))


def reference_run(ctx: StepContext, session: Any, names: list[str], feed: dict[str, Any],
                  path: Path) -> list[Any]:
    """The fp32 graph's outputs on one of verify's inputs; where ONNX Runtime fails on them
    (export ran the graph on its example), the trace kept what that example's values chose."""
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, RuntimeException

    try:
        return session.run(names, feed)
    except (Fail, RuntimeException) as exc:
        cause = str(exc).strip().splitlines()[0][:300]
        raise ctx.fail(f"the fp32 graph fails in ONNX Runtime on verify's inputs ({cause}), "
                       "though it ran on the example it was exported with: the export kept "
                       "what that example's values decided (a loop or branch on them, as a "
                       "mixture of experts that visits only the experts its tokens pick), "
                       "which other inputs break",
                       "no quant setting mends this: try the other exporter (export=dynamo or "
                       "export=torchscript); a forward that branches on its values is not "
                       "supported otherwise", where=str(path)) from None


def run(ctx: StepContext) -> StepResult:
    p = ctx.params
    ref_path = ctx.input_model("reference")
    specs, _ = io_specs(ref_path)
    samples = Samples(specs, "verify", source=ctx.inputs.get("source"))
    feeds = samples.feeds(p["samples"])
    host = reference()
    fp32, _ = adapter(host).step_session(ref_path, host, host.provider_options, ctx.cache_dir)
    names = [o.name for o in fp32.get_outputs()]
    wanted = [reference_run(ctx, fp32, names, feed, ref_path) for feed in feeds]
    del fp32  # one session at a time: two would hold a big model's weights twice
    candidate = candidate_session(ctx)
    per_output: dict[str, list[float]] = {n: [] for n in names}
    max_abs, silent = 0.0, 0
    peak = max((float(np.abs(w).max()) for want in wanted for w in want if w.size), default=0.0)
    for i, (feed, want_all) in enumerate(zip(feeds, wanted, strict=True), 1):
        ctx.progress(f"  verify sample {i}/{len(feeds)}")
        valid = valid_positions(feed)
        for name, got, want in zip(names, candidate.run(names, feed), want_all, strict=True):
            g, w = vectors(got, want, valid)
            per_output[name].extend(cosines(g, w).tolist())
            silent += int(np.sum(~np.any(w != 0, axis=-1)))
            max_abs = max(max_abs, float(np.abs(g - w).max()))
    every = [c for values in per_output.values() for c in values]
    metrics = {"cosine_mean": float(np.mean(every)), "cosine_min": float(np.min(every)),
               "max_abs": max_abs, "samples": len(feeds), "threshold": p["threshold"],
               "vectors": len(every), "zero_reference_vectors": silent, "reference_peak": peak,
               "data": samples.origin,
               "cosine_by_output": {n: float(np.mean(v)) for n, v in per_output.items()}}
    metrics["passed"] = metrics["cosine_mean"] >= p["threshold"]
    (ctx.out / METRICS).write_text(json.dumps(metrics, indent=2, sort_keys=True))
    if not metrics["passed"]:
        raise ctx.fail(f"cosine_mean {metrics['cosine_mean']:.4f} {VERDICTS['verify']} "
                       f"{p['threshold']} (cosine_min {metrics['cosine_min']:.4f}, max_abs "
                       f"{max_abs:.4g}, {len(feeds)} inputs: {samples.origin})",
                       hint(ctx.input_model("candidate"), peak),
                       where=str(ctx.input_model("candidate")))
    return StepResult(metrics=metrics)
