"""A sweep's accuracy matrix: one row per model and precision (and any other swept setting),
one column per target, each cell the target's score of the eval verdict's metric, its change
against PyTorch and the verdict (`0.8123 (-0.0042) PASS`), the way winml-cli's accuracy report
reads. Built from the sweep summary (sweep.json) alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.render import accuracy
from planner.render.markdown import cell as md_cell
from planner.render.results import swept_keys

NAMED = ("model", "quant", "target")   # the groups that place a job in the matrix
MINUS = "\u2212"


@dataclass
class Row:
    label: tuple[str, ...]                                # model, precision, other settings
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)   # target -> cell


def choices(job: dict[str, Any]) -> dict[str, str]:
    """A job's group options: its record's, else what its overrides pick."""
    record = job.get("record") or {}
    picked = {ov.partition("=")[0].lstrip("+~"): ov.partition("=")[2]
              for ov in job["overrides"]}
    return {**picked, **record.get("choices", {})}


def precision(quant: str) -> str:
    return "fp32" if quant == "none" else quant


def _cell(job: dict[str, Any]) -> dict[str, Any]:
    """What a job's cell says: its eval verdict, or why there is none."""
    steps = accuracy.eval_steps(job["record"]) if job.get("record") else []
    if steps:
        m = steps[0]["metrics"]
        return {"metric": m.get("metric"), "pytorch": m.get("eval_pytorch"),
                "target": m.get("eval_target"), "verdict": m.get(accuracy.VERDICT),
                "data": accuracy.data_line(m)}
    if job["status"] != "ok":
        step = ((job.get("record") or {}).get("error") or {}).get("step")
        return {"missing": f"failed at {step}" if step else "config error"}
    return {"missing": "no eval"}


def build(summary: dict[str, Any]) -> tuple[list[str], list[Row], list[str]]:
    """(the extra swept settings, the rows, the targets) of a sweep summary."""
    jobs = summary["jobs"]
    extra = [k for k in swept_keys(jobs) if k not in NAMED]
    rows: dict[tuple[str, ...], Row] = {}
    targets: list[str] = []
    for job in jobs:
        picked = choices(job)
        label = (picked.get("model", "?"), precision(picked.get("quant", "?")),
                 *[f"{k}={picked.get(k, '')}" for k in extra])
        target = picked.get("target", "?")
        targets += [target] * (target not in targets)
        rows.setdefault(label, Row(label)).cells[target] = _cell(job)
    return extra, list(rows.values()), targets


def _same(row: Row, what: str) -> Any:
    """A value every evaluated cell of the row shares (None when they differ or none has it)."""
    values = {c.get(what) for c in row.cells.values() if "missing" not in c}
    return values.pop() if len(values) == 1 else None


def cell_text(c: dict[str, Any] | None, minus: str = "-") -> str:
    if c is None:
        return ""
    if "missing" in c:
        return c["missing"]
    change = None if c["target"] is None or c["pytorch"] is None else c["target"] - c["pytorch"]
    shown = "" if change is None else f" ({change:+.4f})".replace("-", minus)
    return f"{accuracy.number(c['target'])}{shown} {c['verdict']}"


def _grid(extra: list[str], rows: list[Row], targets: list[str],
          minus: str) -> tuple[list[str], list[list[str]]]:
    head = ["model", "precision", *extra, "metric", "PyTorch", *targets]
    body = []
    for row in rows:
        evaluated = any("missing" not in c for c in row.cells.values())
        metric, pytorch = _same(row, "metric"), _same(row, "pytorch")
        varies = "(varies)" if evaluated else "-"
        body.append([*row.label, metric or varies,
                     varies if pytorch is None else accuracy.number(pytorch),
                     *[cell_text(row.cells.get(t), minus) for t in targets]])
    return head, body


def _evaluated(rows: list[Row]) -> bool:
    return any("missing" not in c for r in rows for c in r.cells.values())


def data_lines(rows: list[Row]) -> list[str]:
    """Where each evaluated job's rows came from, once per distinct source."""
    return list(dict.fromkeys(c["data"] for r in rows for c in r.cells.values() if "data" in c))


def text(summary: dict[str, Any]) -> list[str]:
    """The matrix as aligned text (no lines when no job evaluated)."""
    extra, rows, targets = build(summary)
    if not _evaluated(rows):
        return []
    head, body = _grid(extra, rows, targets, "-")
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["", "Accuracy (each target: its score, the change against PyTorch, the verdict):"]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
              for r in [head, *body]]
    lines += [f"  data: {d}" for d in data_lines(rows)]
    return lines


def markdown(summary: dict[str, Any]) -> list[str]:
    """The matrix as a Markdown table (no lines when no job evaluated)."""
    extra, rows, targets = build(summary)
    if not _evaluated(rows):
        return []
    head, body = _grid(extra, rows, targets, MINUS)
    numeric = len(targets) + 1
    legend = ("Each target's cell: its score of the verdict's metric, the change against "
              "PyTorch, and the verdict against `eval.max_drop`.")
    lines = ["", "#### Accuracy", "", legend, "",
             "| " + " | ".join(head) + " |",
             "|" + "---|" * (len(head) - numeric) + "---:|" * numeric]
    lines += ["| " + " | ".join(md_cell(v) for v in r) + " |" for r in body]
    lines += ["", *[f"- Data: {md_cell(d)}" for d in data_lines(rows)]]
    return lines
