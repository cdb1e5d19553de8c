"""What changed between two runs (e.g. w8a8 vs w8a16, or before and after a change): the
latency of every perf step both ran, and the time of every module, as text or Markdown.

Modules are matched by the step that measured them and their tag, so a profile is compared with
a profile and a module timed alone with the same module timed alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner.errors import UsageError
from planner.review import evaldiff

TEXT_ROWS = 30        # module rows in the text diff; the Markdown diff lists them all
LATENCY = "latency_ms_median"


def is_run_record(doc: Any) -> bool:
    return isinstance(doc, dict) and "run_id" in doc and "steps" in doc


def check_record(doc: Any, where: str) -> None:
    """A readable run record (schemas/run.schema.json), or one clear error."""
    import jsonschema

    import schemas

    validator = jsonschema.Draft202012Validator(schemas.load("run"))
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        at = "/".join(str(p) for p in errors[0].absolute_path) or "<root>"
        raise UsageError(f"{where}: not a valid run record at {at}: {errors[0].message}; "
                         "use the run.json a `modelplan run` wrote")


def load_record(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable run record ({exc}); use the run.json a "
                         "`modelplan run` wrote (outputs/<name>/run.json)") from exc
    if not is_run_record(doc):
        raise UsageError(f"{path}: not a run record (no run_id and steps); use the run.json a "
                         "`modelplan run` wrote")
    check_record(doc, path)
    return doc


SWEEP = "sweep.json"  # a sweep directory's summary (beside results.csv and each job's folder)


def load_sweep(path: str) -> dict[str, Any]:
    """The summary of a sweep directory (or its sweep.json), every job's record checked."""
    file = Path(path) / SWEEP if Path(path).is_dir() else Path(path)
    try:
        doc = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: neither a run record nor a sweep directory with a readable "
                         f"{SWEEP} ({exc}); give outputs/<name>/run.json or the directory "
                         "`modelplan run -m` wrote (multirun/DATE/TIME)") from exc
    if not is_sweep(doc):
        raise UsageError(f"{file}: not a sweep summary (no jobs); give the {SWEEP} of a "
                         "`modelplan run -m`")
    for job in doc["jobs"]:
        if job.get("record") is not None:
            check_record(job["record"], f"{file} job {job.get('index')}")
    return doc


def is_sweep(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("jobs"), list) and \
        isinstance(doc.get("steps"), list) and all(
            isinstance(j, dict) and {"index", "overrides", "status"} <= set(j)
            for j in doc["jobs"])


def _perf_steps(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in record["steps"] if s["status"] == "ok" and LATENCY in s["metrics"]}


def _rows(record: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["step"], r["tag"]): r for r in record.get("modules") or []}


def _change(old: float | None, new: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"old_ms": old, "new_ms": new, "delta_ms": None, "delta_percent": None}
    if old is not None and new is not None:
        out["delta_ms"] = round(new - old, 6)
        out["delta_percent"] = round(100.0 * (new - old) / old, 2) if old else None
    return out


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Latency per perf step, the eval metrics and time per module, old (a) vs new (b)."""
    pa, pb = _perf_steps(a), _perf_steps(b)
    latency = [{"step": i, "ep": [pa[i]["metrics"].get("ep"), pb[i]["metrics"].get("ep")],
                **_change(pa[i]["metrics"][LATENCY], pb[i]["metrics"][LATENCY])}
               for i in pa if i in pb]
    ra, rb = _rows(a), _rows(b)
    keys = sorted(set(ra) | set(rb), key=lambda k: (k[0], k[1].strip("/").split("/")))
    modules = []
    for key in keys:
        row = ra.get(key) or rb[key]
        modules.append({"step": key[0], "tag": key[1], "depth": row["depth"],
                        "alone": bool(row.get("alone")),
                        **_change(ra[key]["ms"] if key in ra else None,
                                  rb[key]["ms"] if key in rb else None)})
    evals = evaldiff.diff(a, b)
    return {"old": _identity(a), "new": _identity(b), "latency": latency, "eval": evals,
            "modules": modules,
            "summary": {"perf_steps": len(latency), "eval_steps": len(evals),
                        "modules": len(modules),
                        "only_old": sum(1 for m in modules if m["new_ms"] is None),
                        "only_new": sum(1 for m in modules if m["old_ms"] is None)}}


def _identity(record: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": record["run_id"], "overrides": record.get("overrides", []),
            "status": record["status"]}


def _who(run: dict[str, Any], quote: str) -> str:
    return f"{quote}{run['run_id']}{quote} ({' '.join(run['overrides']) or 'defaults'})"


def summary_line(d: dict[str, Any]) -> str:
    s = d["summary"]
    evals = f", {s['eval_steps']} eval step(s)" if s.get("eval_steps") else ""
    return (f"Diff: {s['perf_steps']} perf step(s), {s['modules']} module row(s) "
            f"({s['only_old']} only in the old run, {s['only_new']} only in the new){evals}.")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _delta(m: dict[str, Any]) -> str:
    if m["delta_ms"] is None:
        return "only in old" if m["new_ms"] is None else "only in new"
    pct = f" ({m['delta_percent']:+.1f} %)" if m["delta_percent"] is not None else ""
    return f"{m['delta_ms']:+.3f}{pct}"


def _shown(modules: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """The rows with the largest changes and their ancestors, in tree order."""
    if limit is None or len(modules) <= limit:
        return modules
    size = sorted(modules, key=lambda m: -abs(m["delta_ms"] or m["old_ms"] or m["new_ms"] or 0))
    keep = {(m["step"], m["tag"]) for m in size[:limit]}
    keep |= {(s, t[:i]) for s, t in keep for i in range(1, len(t)) if t[i] == "/"}
    return [m for m in modules if (m["step"], m["tag"]) in keep]


def render_text(d: dict[str, Any], limit: int | None = TEXT_ROWS) -> str:
    lines = [f"Runs: {_who(d['old'], '')} -> {_who(d['new'], '')}", ""]
    for lat in d["latency"]:
        lines.append(f"  {lat['step']}: median latency {_ms(lat['old_ms'])} -> "
                     f"{_ms(lat['new_ms'])} ms ({_delta(lat)})")
    lines += [""] * bool(d["latency"] and d.get("eval")) + evaldiff.text(d.get("eval", []))
    shown = _shown(d["modules"], limit)
    if shown:
        names = [_label(m, "  ", "") for m in shown]
        width = max(len(n) for n in names)
        lines += ["", f"  {'step':<12} {'module':<{width}}  {'old ms':>9}  {'new ms':>9}  change"]
        lines += [f"  {m['step']:<12} {n:<{width}}  {_ms(m['old_ms']):>9}  "
                  f"{_ms(m['new_ms']):>9}  {_delta(m)}" for m, n in zip(shown, names, strict=True)]
        if len(shown) < len(d["modules"]):
            lines.append(f"  ({len(d['modules']) - len(shown)} more rows; --format md lists "
                         "them all)")
    lines += ["", summary_line(d)]
    return "\n".join(lines) + "\n"


def render_md(d: dict[str, Any]) -> str:
    lines = ["### modelplan diff of two runs", "",
             f"{_who(d['old'], '`')} → {_who(d['new'], '`')}", ""]
    if d["latency"]:
        lines += ["| perf step | old ms | new ms | change |", "|---|---:|---:|---:|"]
        lines += [f"| `{lat['step']}` | {_ms(lat['old_ms'])} | {_ms(lat['new_ms'])} | "
                  f"{_delta(lat)} |" for lat in d["latency"]]
    lines += [""] * bool(d["latency"] and d.get("eval")) + evaldiff.markdown(d.get("eval", []))
    if d["modules"]:
        lines += ["", "| step | module | old ms | new ms | change |", "|---|---|---:|---:|---:|"]
        lines += [f"| `{m['step']}` | {_label(m, '&emsp;', '`')} | {_ms(m['old_ms'])} | "
                  f"{_ms(m['new_ms'])} | {_delta(m)} |" for m in d["modules"]]
    lines += ["", f"**{summary_line(d)}**"]
    return "\n".join(lines) + "\n"


def _label(m: dict[str, Any], indent: str, quote: str) -> str:
    """A module timed alone, or a tree's top, by its full tag; the others indented in their
    tree by their last segment."""
    if m["alone"] or m["depth"] == 1:
        return f"{quote}{m['tag']}{quote}"
    return f"{indent * (m['depth'] - 1)}{quote}{m['tag'].rsplit('/', 1)[-1]}{quote}"
