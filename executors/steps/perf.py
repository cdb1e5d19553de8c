"""perf: session time, latency (median, p90) after warm-up, the EP each node ran on, and where
the time goes per module (executors/runtime/profiling.py). A set of pieces (perf.module) is timed
piece by piece, each alone on the inputs it had in the whole model: one row per module."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from executors.onnx import pieces
from executors.onnx.artifacts import METRICS, MODEL
from executors.onnx.hierarchy import depth
from executors.onnx.iospecs import io_specs
from executors.run.step_api import StepContext, StepResult
from executors.runtime.adapters import adapter
from executors.runtime.profiling import profile
from executors.samples import batches
from planner.core.targets import of_params


def _session(ctx: StepContext, path: Path) -> tuple[Any, str]:
    p = ctx.params
    target = of_params(p)
    return adapter(target).step_session(path, target, p["provider_options"], ctx.cache_dir)


def latency(ctx: StepContext, path: Path, feed: dict[str, Any], label: str = "") -> dict:
    """Session creation time and latency statistics over the step's iterations."""
    p = ctx.params
    t0 = time.perf_counter()
    session, cache = _session(ctx, path)
    session_s = time.perf_counter() - t0
    for _ in range(p["warmup"]):
        session.run(None, feed)
    times = []
    for i in range(p["iterations"]):
        t = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - t) * 1000)
        ctx.progress(f"  {label}iteration {i + 1}/{p['iterations']}: {times[-1]:.1f} ms")
    return {"session_s": round(session_s, 4), "session_cache": cache,
            "latency_ms_median": float(np.median(times)),
            "latency_ms_p90": float(np.percentile(times, 90)),
            "latency_ms_min": float(np.min(times))}


def run(ctx: StepContext) -> StepResult:
    p = ctx.params
    found = pieces.index(ctx.inputs["model"])
    metrics = {"ep": p["ep"], "iterations": p["iterations"], "warmup": p["warmup"]}
    if found is not None and found.get("parts"):  # a split graph: its parts run in a chain
        path = ctx.input_model()
        feed = batches(io_specs(path)[0], 1, "perf")[0]
        metrics.update(latency(ctx, path, feed), parts=len(found["pieces"]))
    elif found is not None:
        metrics.update(_pieces(ctx, found))
    else:
        path = ctx.input_model()
        specs, _ = io_specs(path)
        feed = batches(specs, 1, "perf")[0]
        metrics.update(latency(ctx, path, feed))
        if p["profile_runs"]:
            ctx.progress(f"  profiling {p['profile_runs']} run(s) for the per-module breakdown")
        metrics.update(profile(of_params(p), p["provider_options"], path, feed, p["warmup"],
                               p["profile_runs"], ctx.out / "profile"))
    (ctx.out / METRICS).write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return StepResult(metrics=metrics)


def _pieces(ctx: StepContext, found: dict[str, Any]) -> dict[str, Any]:
    """One row per piece: its module, nodes, and latency timed alone."""
    p, src = ctx.params, ctx.inputs["model"]
    rows = []
    for piece in found["pieces"]:
        where = src / piece["dir"]
        feed = pieces.feeds(where) or batches(io_specs(where / MODEL)[0], 1, "perf")[0]
        ctx.progress(f"  {piece['tag']}")
        stats = latency(ctx, where / MODEL, feed, label=f"{piece['dir']} ")
        on_ep = profile(of_params(p), p["provider_options"], where / MODEL, feed, 0, 0,
                        ctx.out / "profile")
        rows.append({"tag": piece["tag"], "depth": depth(piece["tag"]), "nodes": piece["nodes"],
                     "ms": round(stats["latency_ms_median"], 6),
                     "p90_ms": round(stats["latency_ms_p90"], 6),
                     "min_ms": round(stats["latency_ms_min"], 6),
                     "nodes_on_ep": on_ep["nodes_on_ep"], "nodes_total": on_ep["nodes_total"],
                     "alone": True})
    return {"module": found["module"], "pieces": len(rows), "empty": found["empty"],
            "modules": rows}
