"""perf: session creation time, latency (median, p90) after warm-up, and the EP each node ran
on (from ONNX Runtime's profile)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from executors import qnn
from executors.artifacts import METRICS
from executors.base import StepContext, StepResult
from executors.samples import batches, io_specs
from executors.session_cache import cpu_session


def _session(ctx: StepContext, profile_to: Path | None) -> tuple[Any, str]:
    p = ctx.params
    path = ctx.input_model()
    if p["ep"] == "cpu" and profile_to is None:
        session, info = cpu_session(path, ctx.cache_dir)
        return session, info.state
    so = qnn.session_options(p["ep"], p["backend"], p["provider_options"],
                             cpu_fallback=p["ep"] == "cpu")
    if profile_to is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_to / "profile")
    with qnn.native_log():
        return qnn.session(path, p["ep"], so=so), "off"


def nodes_by_ep(ctx: StepContext, feed: dict[str, Any]) -> dict[str, Any]:
    """Which EP ran each node, from one profiled inference."""
    session, _ = _session(ctx, ctx.out)
    session.run(None, feed)
    trace = Path(session.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    per_ep: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e.get("cat") == "Node" and e.get("args", {}).get("provider"):
            per_ep[e["args"]["provider"]].add(e["name"].removesuffix("_kernel_time")
                                              .removesuffix("_fence_before")
                                              .removesuffix("_fence_after"))
    total = len(set().union(*per_ep.values())) if per_ep else 0
    target = "QNNExecutionProvider" if ctx.params["ep"] == "qnn" else "CPUExecutionProvider"
    return {"nodes_total": total, "nodes_on_ep": len(per_ep.get(target, ())),
            "nodes_by_ep": {ep: len(names) for ep, names in sorted(per_ep.items())}}


def run(ctx: StepContext) -> StepResult:
    p = ctx.params
    specs, _ = io_specs(ctx.input_model())
    feed = batches(specs, 1, "perf")[0]
    t0 = time.perf_counter()
    session, cache = _session(ctx, None)
    session_s = time.perf_counter() - t0
    for _ in range(p["warmup"]):
        session.run(None, feed)
    times = []
    for i in range(p["iterations"]):
        t = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - t) * 1000)
        ctx.progress(f"  iteration {i + 1}/{p['iterations']}: {times[-1]:.1f} ms")
    metrics = {"ep": p["ep"], "session_s": round(session_s, 4), "session_cache": cache,
               "iterations": p["iterations"], "warmup": p["warmup"],
               "latency_ms_median": float(np.median(times)),
               "latency_ms_p90": float(np.percentile(times, 90)),
               "latency_ms_min": float(np.min(times)), **nodes_by_ep(ctx, feed)}
    (ctx.out / METRICS).write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return StepResult(metrics=metrics)
