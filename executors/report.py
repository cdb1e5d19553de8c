"""The run table printed after `modelplan run` / `apply`, and store listings."""

from __future__ import annotations

from typing import Any


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _main_output(step: dict[str, Any]) -> str:
    outs = step["outputs"]
    for name in ("model.onnx", "model_ctx.onnx", "metrics.json", "source.json"):
        if name in outs:
            return outs[name]
    return next(iter(outs.values()), "")


def _note(step: dict[str, Any]) -> str:
    if step["status"] != "ok":
        return step["status"].upper()
    pc = step["proof_check"]
    if pc is not None and not pc["held"]:
        return "proof did not hold"
    m = step["metrics"]
    for key in ("cosine_mean", "latency_ms_median"):
        if key in m:
            return f"{key}={m[key]:.4f}" if key == "cosine_mean" else f"{key}={m[key]:.1f}"
    return ""


def result_summary(record: dict[str, Any]) -> dict[str, Any]:
    """Per run: the artifact, its size, verify metrics and latency (None where absent)."""
    from pathlib import Path

    model = next((p for n, p in record.get("published", {}).items() if n.endswith(".onnx")),
                 None)
    by_op = {s["op"]: s["metrics"] for s in record["steps"] if s["status"] == "ok"}
    verify, perf = by_op.get("verify", {}), by_op.get("perf", {})
    return {"artifact": model, "size_bytes": Path(model).stat().st_size if model else None,
            "cosine_mean": verify.get("cosine_mean"), "cosine_min": verify.get("cosine_min"),
            "latency_ms_median": perf.get("latency_ms_median"),
            "latency_ms_p90": perf.get("latency_ms_p90"), "ep": perf.get("ep")}


def _deliverable(record: dict[str, Any]) -> list[str]:
    r = result_summary(record)
    if not r["artifact"]:
        return []
    lines = [f"Deliverable: {r['artifact']} ({human_bytes(r['size_bytes'])})"]
    if r["cosine_mean"] is not None:
        lines.append(f"Verify: cosine mean {r['cosine_mean']:.4f}, min {r['cosine_min']:.4f}")
    if r["latency_ms_median"] is not None:
        lines.append(f"Latency on {r['ep']}: median {r['latency_ms_median']:.1f} ms, "
                     f"p90 {r['latency_ms_p90']:.1f} ms")
    return lines


def table(record: dict[str, Any]) -> str:
    rows = [("step", "action", "wall", "peak RSS", "note", "output")]
    for s in record["steps"]:
        ran = s["action"] == "run" and s["status"] == "ok"
        rows.append((s["id"], s["action"] if s["status"] != "skipped" else "-",
                     f"{s['wall_s']:.2f} s" if ran else "",
                     f"{s['peak_rss_mb']:.0f} MB" if ran else "",
                     _note(s), _main_output(s)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
             for r in rows]
    counts = {a: sum(1 for s in record["steps"] if s["action"] == a and s["status"] == "ok")
              for a in ("run", "cached", "elided")}
    lines.append("")
    summary = (f"Run {record['status']}: {counts['run']} run, {counts['cached']} cached, "
               f"{counts['elided']} elided in {record['wall_s']:.1f} s.")
    lines.append(summary)
    if record.get("published"):
        lines.extend(_deliverable(record))
    if record["outputs_dir"]:
        lines.append(f"Run record: {record['outputs_dir']}/run.json")
    return "\n".join(lines) + "\n"
