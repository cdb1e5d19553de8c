"""Accuracy for people: an eval step's metrics (schemas/run.schema.json `eval_metrics`) as one
row per metric the task reports (PyTorch, the fp32 export, the target, the drop, the verdict),
for the table after `modelplan run`, `modelplan report` and the rows of a sweep's results.

A step is shown when its metrics hold a verdict, whether it passed or failed on a regression
(a regression fails the run and keeps its metrics in the record).
"""

from __future__ import annotations

from typing import Any

from planner.models.evaluation import EVAL
from planner.render.markdown import cell

VERDICT = "eval_verdict"
FIELDS = ("eval_metric", "eval_pytorch", "eval_fp32", "eval_target", "eval_drop",
          "eval_verdict")  # the columns of a sweep's results rows
MODELS = ("pytorch", "fp32_onnx", "target")


def eval_steps(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps that judged accuracy (a verdict in their metrics), in run order."""
    return [s for s in record["steps"] if VERDICT in (s.get("metrics") or {})]


def fields(record: dict[str, Any] | None) -> dict[str, Any]:
    """A run's eval columns for results.csv / results.json (None where it has no eval)."""
    steps = eval_steps(record) if record else []
    if not steps:
        return dict.fromkeys(FIELDS)
    m = steps[0]["metrics"]
    return {"eval_metric": m.get("metric"), "eval_pytorch": m.get("eval_pytorch"),
            "eval_fp32": m.get("eval_fp32"), "eval_target": m.get("eval_target"),
            "eval_drop": m.get("eval_drop"), "eval_verdict": m.get(VERDICT)}


def lower_is_better(m: dict[str, Any], metric: str) -> bool:
    """Whether less of `metric` is better (wer, abs_rel), by the task's declaration."""
    if metric == m.get("metric") and "higher_is_better" in m:
        return not m["higher_is_better"]
    task = EVAL.get(m.get("task", ""))
    return task is not None and metric in task.lower_is_better


def drop(m: dict[str, Any], metric: str, value: float | None) -> float | None:
    """How much worse than PyTorch `value` is (positive: worse), in the metric's units."""
    base = (m.get("scores") or {}).get("pytorch", {}).get(metric)
    if base is None or value is None:
        return None
    return round((value - base) if lower_is_better(m, metric) else (base - value), 6)


def metric_rows(m: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per metric the step scored, the verdict's metric first: its value for PyTorch,
    the fp32 export and the target, the target's drop, and (verdict metric only) max_drop and
    the verdict."""
    scores = m.get("scores") or {}
    names = list(dict.fromkeys(n for which in MODELS for n in scores.get(which, {})))
    verdict_metric = m.get("metric")
    names.sort(key=lambda n: n != verdict_metric)
    rows = []
    for name in names:
        values = {w: scores.get(w, {}).get(name) for w in MODELS}
        judged = name == verdict_metric
        rows.append({"metric": name, "verdict_metric": judged, **values,
                     "drop": m.get("eval_drop") if judged else drop(m, name, values["target"]),
                     "max_drop": m.get("max_drop") if judged else None,
                     "verdict": m.get(VERDICT) if judged else None})
    return rows


def number(v: Any, signed: bool = False) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{v:+.4f}" if signed else f"{v:.4f}"


def limit(v: Any) -> str:
    """eval.max_drop as the config says it (0.01, 0.0001); blank for the other metrics."""
    return "" if v is None else f"{v:g}"


def target_label(m: dict[str, Any]) -> str:
    return f"target ({m.get('target') or m.get('ep', '?')})"


def data_line(m: dict[str, Any]) -> str:
    """Where the rows came from and what they were scored against."""
    digest = m.get("dataset_digest") or ""
    shown = f"; data digest {digest[:12]}" if len(digest) == 64 else ""
    data = m.get("data") or f"{m.get('samples', '?')} samples"
    return f"{data}{shown}"


def _notes(m: dict[str, Any]) -> list[str]:
    notes = m.get("notes") or []
    return [notes] if isinstance(notes, str) else [str(n) for n in notes]


def _title(step: dict[str, Any]) -> str:
    m = step["metrics"]
    which = "" if step["id"] == "eval" else f" ({step['id']})"
    failed = f" ({m.get(VERDICT)}, the run failed on it)" if step.get("status") == "failed" \
        else ""
    return f"Eval{which}: {m.get('task', '?')}{failed}"


def text(record: dict[str, Any]) -> list[str]:
    """The eval tables under a run's step table (no lines for a run without eval)."""
    lines: list[str] = []
    for step in eval_steps(record):
        m = step["metrics"]
        head = ("metric", "PyTorch", "fp32 ONNX", target_label(m), "drop", "max_drop", "verdict")
        grid = [head] + [(r["metric"] + (" *" if r["verdict_metric"] else ""),
                          number(r["pytorch"]), number(r["fp32_onnx"]), number(r["target"]),
                          number(r["drop"], signed=True), limit(r["max_drop"]),
                          r["verdict"] or "") for r in metric_rows(m)]
        widths = [max(len(row[i]) for row in grid) for i in range(len(head))]
        lines += ["", _title(step)]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                  for row in grid]
        lines.append(f"  * the verdict's metric; data: {data_line(m)}")
        lines += [f"  note: {n}" for n in _notes(m)]
    return lines


def markdown(record: dict[str, Any]) -> list[str]:
    """The eval tables of a run's Markdown report."""
    lines: list[str] = []
    for step in eval_steps(record):
        m = step["metrics"]
        head = f"| metric | PyTorch | fp32 ONNX | {target_label(m)} | drop | max_drop | verdict |"
        lines += ["", f"#### {_title(step)}", "", head, "|---|---:|---:|---:|---:|---:|---|"]
        for r in metric_rows(m):
            name = f"**{r['metric']}**" if r["verdict_metric"] else r["metric"]
            verdict = f"**{r['verdict']}**" if r["verdict"] else ""
            lines.append(f"| {name} | {number(r['pytorch'])} | {number(r['fp32_onnx'])} | "
                         f"{number(r['target'])} | {number(r['drop'], signed=True)} | "
                         f"{limit(r['max_drop'])} | {verdict} |")
        lines += ["", f"Data: {cell(data_line(m))}. The verdict is on the **bold** metric."]
        lines += [f"Note: {cell(n)}" for n in _notes(m)]
    return lines
