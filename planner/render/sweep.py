"""A sweep for people: its merged plan as text (`modelplan plan -m`) and its results with the
accuracy matrix (`modelplan report <sweep dir>`, text or Markdown)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from planner.render import jsontext, matrix, results
from planner.render.common import short, summary_line
from planner.render.markdown import cell


def render(sweep: dict[str, Any]) -> str:
    s = sweep["summary"]
    lines = [f"modelplan plan -m: {s['jobs']} jobs", ""]
    for job in sweep["jobs"]:
        state = f"error: {job['error']}" if job["error"] else summary_line(job["plan"])
        lines.append(f"  job {job['index']}: {' '.join(job['overrides'])}")
        lines.append(f"    {state}")
    shared = [st for st in sweep["steps"] if len(st["jobs"]) > 1]
    if shared:
        lines += ["", "Shared steps (sweep-CSE: one step for every job that has its key):"]
        lines += [f"  {st['id']:<10} {short(st['key'])}  {st['action']:<6}  jobs "
                  f"{spans(st['jobs'])}" for st in shared]
    lines += ["", (f"Sweep plan: {s['jobs']} jobs, {s['total_steps']} steps, "
                   f"{s['unique_steps']} unique ({s['run']} to run, {s['cached']} cached, "
                   f"{s['elided']} elided), {s['shared_steps']} shared, "
                   f"{s['failed_jobs']} job(s) with config errors.")]
    return "\n".join(lines) + "\n"


def json_pieces(sweep: dict[str, Any]) -> Iterator[str]:
    """`json.dumps(sweep, indent=2)` and a newline, in pieces of one item of a top-level list
    each (a job's whole plan): a 10,000-job sweep is never one string of 300 MB, nor a list of
    millions of its tokens."""
    if not sweep:
        yield "{}\n"
        return
    for n, (key, value) in enumerate(sweep.items()):
        yield ("{" if n == 0 else ",") + "\n  " + jsontext.dumps(key) + ": "
        if isinstance(value, list) and value:
            for i, item in enumerate(value):
                yield ("[" if i == 0 else ",") + "\n    " + jsontext.dumps(item, "\n    ")
            yield "\n  ]"
        else:
            yield jsontext.dumps(value, "\n  ")
    yield "\n}\n"


def spans(jobs: list[int]) -> str:
    """Job numbers with each run of consecutive ones as a range: `0-499, 501, 503-999`."""
    out: list[tuple[int, int]] = []
    for n in sorted(jobs):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return ", ".join(f"{a}" if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}"
                     for a, b in out)


def report_text(summary: dict[str, Any]) -> str:
    """The results table as `modelplan run -m` printed it, then the accuracy matrix."""
    return results.table(summary) + "".join(f"{line}\n" for line in matrix.text(summary))


def report_markdown(summary: dict[str, Any]) -> str:
    """The sweep for a pull-request comment: a row per job, then the accuracy matrix."""
    shown = results.grid(summary)
    lines = [f"### modelplan sweep — {cell(results.summary_line(summary))}", ""]
    if shown[0]:
        lines += ["| " + " | ".join(shown[0]) + " |", "|" + "---|" * len(shown[0])]
        lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in shown[1:]]
    lines += [f"- job {j['index']} failed: {cell(j['error'] or '')}"
              for j in summary["jobs"] if j["status"] != "ok"]
    lines += matrix.markdown(summary)
    return "\n".join(lines) + "\n"
