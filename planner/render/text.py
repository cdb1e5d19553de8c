"""Plain-text plan, terraform-style: a line per step with its action and reason, proofs,
and one summary line."""

from __future__ import annotations

from typing import Any

from planner.core import resources
from planner.render import origin
from planner.render.common import (
    MARK,
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


def render(ir: dict[str, Any]) -> str:
    steps = ir["steps"]
    width = max(len(s["id"]) for s in steps)
    lines = [f"modelplan plan  {headline(ir)}", *[f"  ! {n}" for n in symbolic_notes(ir)], ""]
    on_ray = resources.shown(ir)
    for s in steps:
        inputs = ", ".join(f"{r}<-{src}" if r != "model" else src for r, src in s["inputs"].items())
        lines.append(f"  {MARK[s['action']]} {s['id']:<{width}}  {s['action']:<6}  "
                     f"{short(s['key'])}  {params_line(s['params'])}".rstrip())
        reads = f"reads {inputs}; " if inputs else ""
        lines.append(f"  {'':<{width + 2}}  {'':<6}  {reads}{why(s, brief=True)}{peak_text(s)}")
        lines += [f"  {'':<{width + 2}}  {'':<6}  {label}: {said}" for label, said in details(s)]
        if on_ray:
            ask = resources.request(s, ir["config"]["executor"]).describe()
            lines.append(f"  {'':<{width + 2}}  {'':<6}  ray: {ask}")
    if ir["rewrites"]:
        lines += ["", "Proofs:"]
        for rw in ir["rewrites"]:
            lines.append(f"  {rw['rule']}: {rw['action']} {rw['step']}")
            lines += [f"    because {premise_text(p)}" for p in rw["premises"]]
            lines.append(f"    so {rw['conclusion']}")
    imported = origin.summary(ir)
    lines += ["", f"Deliverable: {ir['deliverable']}", *([imported] if imported else [])]
    if memory := memory_line(ir):
        lines.append(memory)
    if on_ray and (where := resources.footer(ir)):
        lines.append(where)
    lines.append(summary_line(ir))
    return "\n".join(lines) + "\n"

