"""Markdown plan for a pull-request comment."""

from __future__ import annotations

from typing import Any

from planner.core import resources
from planner.core.ops import OPS
from planner.render import origin
from planner.render.common import (
    details,
    headline,
    memory_line,
    params_line,
    peak_text,
    premise_text,
    short,
    summary_line,
    symbolic_notes,
    why,
)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(ir: dict[str, Any]) -> str:
    on_ray = resources.shown(ir)
    extra = " ray resources |" if on_ray else ""
    lines = [f"### modelplan plan — {cell(headline(ir))}", "",
             *[f"> **Note:** {cell(n)}" for n in symbolic_notes(ir)],
             *([""] if symbolic_notes(ir) else []),
             f"| step | op | action | key | params | why |{extra}",
             "|---|---|---|---|---|---|" + ("---|" if on_ray else "")]
    for s in ir["steps"]:
        action = f"~~{s['action']}~~" if s["action"] == "elided" else s["action"]
        ask = f" {cell(resources.request(s, ir['config']['executor']).describe())} |" \
            if on_ray else ""
        lines.append(f"| `{s['id']}` | {s['op']} | {action} | `{short(s['key'])}` | "
                     f"{cell(params_line(s['params']))} | {cell(why(s) + peak_text(s))} |{ask}")
    said = [f"- `{s['id']}` {label}: {cell(text)}" for s in ir["steps"]
            for label, text in details(s)]
    lines += ["", *said] if said else []
    lines += origin.markdown(ir, cell)
    if ir["rewrites"]:
        lines += ["", "<details><summary>Proofs</summary>", ""]
        for rw in ir["rewrites"]:
            lines.append(f"- **{rw['rule']}** {rw['action']} `{rw['step']}`: {cell(rw['conclusion'])}")
            lines += [f"  - {cell(premise_text(p))}" for p in rw["premises"]]
        lines += ["", "</details>"]
    lines += ["", "<details><summary>Ops</summary>", "", "| op | what it does |", "|---|---|"]
    lines += [f"| {name} | {cell(OPS[name].summary)} |"
              for name in dict.fromkeys(s["op"] for s in ir["steps"]) if name in OPS]
    memory = memory_line(ir)
    lines += ["", "</details>", *(["", cell(memory)] if memory else []), "",
              f"**{summary_line(ir)}**"]
    return "\n".join(lines) + "\n"
