"""What changed in accuracy between two runs: per eval step both (or either) ran, each metric's
PyTorch baseline and target score, old and new, and the verdict's change, as text or Markdown
rows for `modelplan diff OLD/run.json NEW/run.json`.

A regression fails its run but keeps its metrics, so a failed run's eval is compared too.
"""

from __future__ import annotations

from typing import Any

from planner.render import accuracy
from planner.render.markdown import cell

SIDES = ("old", "new")


def _pair(a: Any, b: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"old": a, "new": b, "delta": None}
    if isinstance(a, int | float) and isinstance(b, int | float):
        out["delta"] = round(b - a, 6)
    return out


def _step(step_id: str, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """One eval step's comparison (`old`/`new`: its metrics, empty where it did not run)."""
    rows = {side: {r["metric"]: r for r in accuracy.metric_rows(m)}
            for side, m in zip(SIDES, (old, new), strict=True)}
    names = list(dict.fromkeys([*rows["new"], *rows["old"]]))
    metrics = []
    for name in names:
        o, n = rows["old"].get(name, {}), rows["new"].get(name, {})
        metrics.append({"metric": name, "verdict_metric": bool(o.get("verdict_metric")
                                                               or n.get("verdict_metric")),
                        "pytorch": _pair(o.get("pytorch"), n.get("pytorch")),
                        "target": _pair(o.get("target"), n.get("target")),
                        "drop": _pair(o.get("drop"), n.get("drop"))})
    fields = ("task", "metric", "ep", "max_drop", accuracy.VERDICT, "dataset_digest", "data")
    both = {f: [old.get(f), new.get(f)] for f in fields}
    return {"step": step_id, **{f: v for f, v in both.items() if f != accuracy.VERDICT},
            "verdict": both[accuracy.VERDICT],
            "same_data": old.get("dataset_digest") == new.get("dataset_digest"),
            "metrics": metrics}


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The eval steps of run records a (old) and b (new), by step id."""
    ea = {s["id"]: s["metrics"] for s in accuracy.eval_steps(a)}
    eb = {s["id"]: s["metrics"] for s in accuracy.eval_steps(b)}
    return [_step(i, ea.get(i, {}), eb.get(i, {})) for i in dict.fromkeys([*ea, *eb])]


def _arrow(pair: list[Any], fmt: Any = str) -> str:
    old, new = (("-" if v is None else fmt(v)) for v in pair)
    return old if old == new else f"{old} -> {new}"


def _values(p: dict[str, Any]) -> str:
    return f"{accuracy.number(p['old'])} -> {accuracy.number(p['new'])}"


def _change(p: dict[str, Any]) -> str:
    if p["delta"] is not None:
        return accuracy.number(p["delta"], signed=True)
    return "only in old" if p["new"] is None else "only in new"


def _head(e: dict[str, Any]) -> str:
    return (f"{_arrow(e['task'])} on {_arrow(e['ep'])}, verdict {_arrow(e['verdict'])} "
            f"({_arrow(e['metric'])}, max_drop {_arrow(e['max_drop'])})")


def _data_notes(e: dict[str, Any]) -> list[str]:
    if e["same_data"]:
        return []
    return [f"different data: {_arrow(e['data'])}; the scores are not comparable row for row"]


def text(evals: list[dict[str, Any]]) -> list[str]:
    """The text diff's eval lines (none when neither run evaluated)."""
    lines: list[str] = []
    for e in evals:
        grid = [("metric", "PyTorch old -> new", "target old -> new", "change")]
        grid += [(m["metric"] + (" *" if m["verdict_metric"] else ""), _values(m["pytorch"]),
                  _values(m["target"]), _change(m["target"])) for m in e["metrics"]]
        widths = [max(len(r[i]) for r in grid) for i in range(4)]
        lines += [""] * bool(lines) + [f"  {e['step']}: {_head(e)}"]
        lines += ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                  for r in grid]
        lines += [f"    {n}" for n in _data_notes(e)]
    return lines


def markdown(evals: list[dict[str, Any]]) -> list[str]:
    """The Markdown diff's eval tables (none when neither run evaluated)."""
    lines: list[str] = []
    for e in evals:
        head = cell(_head(e)).replace(" -> ", " \u2192 ")
        lines += [""] * bool(lines) + [f"**{e['step']}**: {head}", "",
                  "| metric | PyTorch old | PyTorch new | target old | target new | change |",
                  "|---|---:|---:|---:|---:|---:|"]
        for m in e["metrics"]:
            name = f"**{m['metric']}**" if m["verdict_metric"] else m["metric"]
            p, t = m["pytorch"], m["target"]
            lines.append(f"| {name} | {accuracy.number(p['old'])} | {accuracy.number(p['new'])} "
                         f"| {accuracy.number(t['old'])} | {accuracy.number(t['new'])} | "
                         f"{_change(t)} |")
        lines += [line for n in _data_notes(e) for line in ("", f"> {cell(n)}")]
    return lines
