"""A sweep's results, one row per job: the table printed after `modelplan run -m` and the
rows of results.csv / results.json (one definition for all three)."""

from __future__ import annotations

import csv
import io
from typing import Any

from planner.render import accuracy
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
                    **accuracy.fields(j["record"]), "error": j.get("error")})
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


def _eval_cell(row: dict[str, Any]) -> str:
    """metric, target value and verdict in one cell (results.csv has each in a column)."""
    if row["eval_verdict"] is None:
        return "-"
    return f"{row['eval_metric']} {accuracy.number(row['eval_target'])} {row['eval_verdict']}"


def grid(summary: dict[str, Any]) -> list[list[str]]:
    """The shown results: a header and a row per job (eval's columns in one, when any job
    evaluated)."""
    data = rows(summary)
    hidden = ("cosine_min", "error", *accuracy.FIELDS)
    cols = [c for c in data[0] if c not in hidden] if data else []
    evaluated = any(r["eval_verdict"] is not None for r in data)
    return [cols + ["eval"] * evaluated,
            *[[_cell(r, c) for c in cols] + [_eval_cell(r)] * evaluated for r in data]]


def summary_line(summary: dict[str, Any]) -> str:
    unique = summary["steps"]
    built = sum(s["action"] == "run" and s["status"] == "ok" for s in unique)
    failed = [j for j in summary["jobs"] if j["status"] != "ok"]
    cached = sum(s["action"] == "cached" for s in unique)
    elided = sum(s["action"] == "elided" for s in unique)
    return (f"Sweep: {len(summary['jobs'])} jobs, {len(unique)} unique steps ({built} run, "
            f"{cached} cached, {elided} elided), {len(failed)} failed, in "
            f"{summary['wall_s']:.1f} s.")


def table(summary: dict[str, Any]) -> str:
    """The results table and the sweep's summary line."""
    shown = grid(summary)
    widths = [max(len(row[i]) for row in shown) for i in range(len(shown[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
             for row in shown]
    failed = [j for j in summary["jobs"] if j["status"] != "ok"]
    lines += ["", summary_line(summary)]
    lines += [f"  job {j['index']} failed: {j['error']}" for j in failed]
    lines.append(f"Results: {summary['sweep_dir']}/results.csv")
    return "\n".join(lines) + "\n"

