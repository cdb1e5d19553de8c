"""What an import says: per recipe the fields mapped and dropped (with why), and for a tree one
row per recipe file (model id, model type, task, target, precision, status)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from planner.recipes.convert import IMPORTED, Build
from planner.recipes.ledger import DROPPED, MAPPED, Entry, show

COLUMNS = ("recipe", "model id", "model type", "task", "target", "precision", "status")


def entry_line(e: Entry) -> str:
    head = f"{e.outcome:<7}  {e.field} = {show(e.value)}"
    if e.outcome == MAPPED:
        to = f" -> {e.config}" if e.config else ""
        return f"{head}{to}" + (f"  ({e.note})" if e.note else "")
    return f"{head}  ({e.note})"


def counts(build: Build) -> str:
    c = Counter(e.outcome for e in build.entries)
    return f"{len(build.entries)} fields: {c[MAPPED]} mapped, {c[DROPPED]} dropped"


def status(build: Build, config: str = "") -> str:
    if build.status == IMPORTED:
        return f"imported -> {config or build.name}"
    return f"{build.status}: {build.message}"


def rows(builds: list[Build], out: str) -> list[tuple[str, ...]]:
    """One row per recipe file (the two files of an encoder-decoder pair share a config)."""
    found = []
    for b in builds:
        for f in b.files:
            r = b.row
            found.append((f.shown, r.get("model_id", ""), r.get("model_type", ""),
                          r.get("task", ""), r.get("target", ""), r.get("precision", ""),
                          status(b, f"{out}/{b.name}.yaml")))
    return found


def text_table(builds: list[Build], out: str) -> str:
    body = rows(builds, out)
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(COLUMNS[:-1])]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, [*widths, 0], strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, [*widths, 0], strict=True)).rstrip()
              for r in body]
    return "\n".join(lines) + "\n"


def warnings(builds: list[Build], shown: int | None = None) -> list[str]:
    """What stops imported configs planning (an eval dataset not on this machine), each once
    with the configs it stops (the first `shown` of them named)."""
    by: dict[str, list[str]] = {}
    for b in builds:
        if b.status == IMPORTED:
            for w in b.warnings:
                by.setdefault(w, []).append(b.name)
    out = []
    for w, names in by.items():
        named = names if shown is None else names[:shown]
        more = f" and {len(names) - len(named)} more" if len(named) < len(names) else ""
        out.append(f"{w} ({len(names)} config{'s' * (len(names) > 1)}: "
                   f"{', '.join(named)}{more})")
    return out


def summary(builds: list[Build]) -> str:
    files = Counter()
    for b in builds:
        files[b.status] += len(b.files)
    made = sum(1 for b in builds if b.status == IMPORTED)
    return (f"{sum(files.values())} recipes: {files[IMPORTED]} imported ({made} configs), "
            f"{files['unsupported']} unsupported, {files['failed']} failed.")


def markdown(builds: list[Build], out: str) -> str:
    """The table and every imported build's field report, for a file or a pull request."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows(builds, out)]
    lines += ["", summary(builds), ""]
    lines += [f"- **Will not plan yet:** {cell(w)}" for w in warnings(builds)]
    lines += [""] if warnings(builds) else []
    for b in builds:
        if b.status != IMPORTED:
            continue
        lines += [f"### `{b.name}`", "", f"{cell(b.shown)}: {counts(b)}.", ""]
        lines += [f"> **Will not plan yet:** {cell(w)}" for w in b.warnings]
        lines += [""] if b.warnings else []
        lines += [f"- {cell(entry_line(e))}" for e in b.entries]
        lines.append("")
    return "\n".join(lines)


def to_json(builds: list[Build], out: str) -> list[dict[str, Any]]:
    return [{"recipes": [f.shown for f in b.files], "status": b.status, "message": b.message,
             "config": f"{out}/{b.name}.yaml" if b.status == IMPORTED else None,
             "config_name": b.name or None, **b.row, "warnings": b.warnings,
             "fields": [e.to_json() for e in b.entries]} for b in builds]
