"""Where the time goes, for people: a run record's per-module rows (`modules[]`) as a tree
with times (text), or as Markdown tables for a pull request.

Rows come in two kinds: a profile of the whole model (one row per module, its time with
everything below it, and its share of the run), and modules timed alone (`perf.module`, one
row per matching module).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TOP = 15      # modules shown under a run's table; `modelplan report` shows them all
CLASSES = 8   # module classes in the by-class summary
SOURCES = {"onnxruntime-cpu": "ONNX Runtime profiler", "qnn-htp": "QNN EP profiling, HTP cycles"}


def by_step(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The record's module rows grouped by the step that measured them, in step order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in record.get("modules") or []:
        out.setdefault(row["step"], []).append(row)
    return out


def step_of(record: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in record["steps"] if s["id"] == step_id)


def label(row: dict[str, Any], rooted: bool) -> str:
    """A row's name in a tree: the full tag at the top, else its last segment."""
    return row["tag"] if rooted else row["tag"].rsplit("/", 1)[-1]


def top(rows: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """The `limit` slowest modules and their ancestors, in tree order (all when None)."""
    if limit is None or len(rows) <= limit:
        return rows
    chosen = {r["tag"] for r in sorted(rows, key=lambda r: -r["ms"])[:limit]}
    chosen |= {t for tag in chosen for t in _ancestors(tag)}
    return [r for r in rows if r["tag"] in chosen]


def _ancestors(tag: str) -> list[str]:
    parts = tag.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def headline(step: dict[str, Any]) -> str:
    """One line: what was profiled and how much of it the rows account for."""
    prof = step["metrics"].get("profile") or {}
    what = SOURCES.get(prof.get("source", ""), prof.get("source", "profile"))
    runs = prof.get("runs", 0)
    total, cover = prof.get("total_ms"), prof.get("coverage_percent")
    if total is None or cover is None:
        return f"{step['id']} on {step['metrics'].get('ep')} ({what}): {prof.get('note', '')}"
    runs_text = f"{runs} run" + ("" if runs == 1 else "s")
    return (f"{step['id']} on {step['metrics'].get('ep')} ({what}, {runs_text}): "
            f"{total:.2f} ms per run, {cover:.1f} % attributed to modules")


def _number(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, int | float) else "-"


def tree_text(rows: list[dict[str, Any]], limit: int | None = TOP,
              record_path: str = "RUN.json") -> list[str]:
    """A profile's rows as an indented tree: ms per run, share, nodes (and HTP cycles)."""
    shown = top(rows, limit)
    cycles = any("cycles" in r for r in shown)
    base = min(r["depth"] for r in shown)
    cells = [(("  " * (r["depth"] - base)) + label(r, r["depth"] == base),
              _number(r["ms"], ".3f"), _number(r.get("percent"), ".1f"), str(r["nodes"]),
              _number(r.get("cycles", 0) / 1e6, ".3f") if cycles else "") for r in shown]
    head = ("module", "ms", "%", "nodes", "Mcycles" if cycles else "")
    lines = _columns([head, *cells])
    if len(shown) < len(rows):
        lines.append(f"  ({len(rows) - len(shown)} more modules; `modelplan report "
                     f"{record_path}` lists them all)")
    return lines


def by_class(rows: list[dict[str, Any]], limit: int = CLASSES) -> list[dict[str, Any]]:
    """Time per module class (instances summed, a class inside itself counted once), slowest
    first, the root left out: which kind of module the time goes to."""
    totals: dict[str, dict[str, Any]] = {}
    base = min(r["depth"] for r in rows)
    for r in rows:
        if r["depth"] == base:
            continue
        name = _class(r["tag"])
        if any(_class(t) == name for t in _ancestors(r["tag"])):
            continue
        entry = totals.setdefault(name, {"class": name, "count": 0, "ms": 0.0, "percent": 0.0})
        entry["count"] += 1
        entry["ms"] += r["ms"]
        entry["percent"] += r.get("percent") or 0.0
    return sorted(totals.values(), key=lambda e: -e["ms"])[:limit]


def _class(tag: str) -> str:
    return tag.rsplit("/", 1)[-1].partition(".")[0]


def class_text(rows: list[dict[str, Any]]) -> list[str]:
    cells = [(e["class"], str(e["count"]), f"{e['ms']:.3f}", f"{e['percent']:.1f}")
             for e in by_class(rows)]
    return _columns([("by class", "modules", "ms", "%"), *cells]) if cells else []


def alone_text(rows: list[dict[str, Any]]) -> list[str]:
    cells = [(r["tag"], str(r["nodes"]), _number(r["ms"], ".3f"), _number(r.get("p90_ms"), ".3f"),
              f"{r.get('nodes_on_ep', '-')}/{r.get('nodes_total', '-')}") for r in rows]
    return _columns([("module", "nodes", "median ms", "p90 ms", "on EP"), *cells])


def _columns(table: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        first = row[0].ljust(widths[0])
        rest = "  ".join(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True) if w)
        lines.append(f"  {first}  {rest}".rstrip())
    return lines


def sections(record: dict[str, Any], limit: int | None,
             render: Callable[[str, list[str]], list[str]]) -> list[str]:
    """One section per step with module rows: `render(title, body lines)` lays it out."""
    out: list[str] = []
    for step_id, rows in by_step(record).items():
        step = step_of(record, step_id)
        if any(r.get("alone") for r in rows):
            module = step["metrics"].get("module", "")
            title = (f"Modules alone ({step_id} on {step['metrics'].get('ep')}, "
                     f"perf.module={module})")
            out += render(title, alone_text(rows))
        else:
            out += render(f"Where the time goes: {headline(step)}",
                          [*tree_text(rows, limit, run_json(record)), "",
                           *class_text(rows)])
    return out


def run_json(record: dict[str, Any]) -> str:
    """Where the run wrote its record (outputs/<name>/run.json), as a command line names it."""
    import shlex

    from planner.outputs import record_file

    return shlex.quote(record_file(record))


def text(record: dict[str, Any], limit: int | None = TOP) -> list[str]:
    """The module sections of a run, as text, with the notes of profiles without rows."""
    lines = sections(record, limit, lambda title, body: ["", title + ":", *body])
    measured = set(by_step(record))
    for s in record["steps"]:
        prof = s["metrics"].get("profile")
        if prof and s["id"] not in measured:
            lines += ["", f"Where the time goes: {headline(s)}"]
    return lines


def markdown(record: dict[str, Any]) -> list[str]:
    """Every module row, as Markdown tables (the tree is kept by indentation)."""
    out: list[str] = []
    for step_id, rows in by_step(record).items():
        step = step_of(record, step_id)
        if any(r.get("alone") for r in rows):
            title = (f"#### Modules alone — `{step_id}` (perf.module="
                     f"`{step['metrics'].get('module', '')}`, {step['metrics'].get('ep')})")
            out += ["", title, "", "| module | nodes | median ms | p90 ms | nodes on EP |",
                    "|---|---:|---:|---:|---:|"]
            out += [f"| `{r['tag']}` | {r['nodes']} | {_number(r['ms'], '.3f')} | "
                    f"{_number(r.get('p90_ms'), '.3f')} | {r.get('nodes_on_ep', '-')}/"
                    f"{r.get('nodes_total', '-')} |" for r in rows]
            continue
        base = min(r["depth"] for r in rows)
        out += ["", f"#### Where the time goes — {headline(step)}", "",
                "| module | nodes | ms | % |", "|---|---:|---:|---:|"]
        out += [f"| {'&emsp;' * (r['depth'] - base)}`{label(r, r['depth'] == base)}` | "
                f"{r['nodes']} | {_number(r['ms'], '.3f')} | {_number(r.get('percent'), '.1f')} |"
                for r in rows]
        out += ["", "| module class | modules | ms | % |", "|---|---:|---:|---:|"]
        out += [f"| `{e['class']}` | {e['count']} | {e['ms']:.3f} | {e['percent']:.1f} |"
                for e in by_class(rows)]
    return out
