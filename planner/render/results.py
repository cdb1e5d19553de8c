"""A sweep's results, one row per job: the table printed after `modelplan run -m` and the
rows of results.csv / results.json (one definition for all three)."""

from __future__ import annotations

import csv
import io
from typing import Any

from planner.render.run import result_summary
from planner.support.units import human_bytes


def swept_keys(jobs: list[dict[str, Any]]) -> list[str]:
    """The override keys whose value differs between jobs (what a results row shows)."""
    values: dict[str, set[str]] = {}
    for j in jobs:
        for ov in j["overrides"]:
            k, _, v = ov.partition("=")
            values.setdefault(k, set()).add(v)
    return [k for k, vs in values.items() if len(vs) > 1]


def rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    keys = swept_keys(summary["jobs"])
    out = []
    for j in summary["jobs"]:
        r = result_summary(j["record"]) if j["record"] else {}
        picked = {ov.partition("=")[0]: ov.partition("=")[2] for ov in j["overrides"]}
        out.append({"job": j["index"], **{k: picked.get(k, "") for k in keys},
                    "status": j["status"], "artifact": r.get("artifact"),
                    "size_bytes": r.get("size_bytes"), "cosine_mean": r.get("cosine_mean"),
                    "cosine_min": r.get("cosine_min"),
                    "latency_ms_median": r.get("latency_ms_median"),
                    "error": j.get("error")})
    return out


def csv_text(table: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(table[0]) if table else ["job"])
    writer.writeheader()
    writer.writerows(table)
    return buf.getvalue()


def _cell(row: dict[str, Any], col: str) -> str:
    v = row[col]
    if v is None:
        return "-"
    if col == "size_bytes":
        return human_bytes(v)
    if isinstance(v, float):
        return f"{v:.4f}" if col.startswith("cosine") else f"{v:.1f}"
    return str(v)


def table(summary: dict[str, Any]) -> str:
    """The results table and the sweep's summary line."""
    data = rows(summary)
    cols = [c for c in data[0] if c not in ("cosine_min", "error")] if data else []
    grid = [cols] + [[_cell(r, c) for c in cols] for r in data]
    widths = [max(len(row[i]) for row in grid) for i in range(len(cols))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in grid]
    unique = summary["steps"]
    built = sum(s["action"] == "run" and s["status"] == "ok" for s in unique)
    failed = [j for j in summary["jobs"] if j["status"] != "ok"]
    cached = sum(s["action"] == "cached" for s in unique)
    elided = sum(s["action"] == "elided" for s in unique)
    lines += ["", (f"Sweep: {len(summary['jobs'])} jobs, {len(unique)} unique steps "
                   f"({built} run, {cached} cached, {elided} elided), {len(failed)} failed, "
                   f"in {summary['wall_s']:.1f} s.")]
    lines += [f"  job {j['index']} failed: {j['error']}" for j in failed]
    lines.append(f"Results: {summary['sweep_dir']}/results.csv")
    return "\n".join(lines) + "\n"
