"""Mermaid flowchart of the plan: elided steps dashed, cached steps grey."""

from __future__ import annotations

from typing import Any


def node_id(step_id: str) -> str:
    return step_id.replace(".", "_")


def render(ir: dict[str, Any]) -> str:
    symbolic = {x["step"] for x in ir.get("symbolic_sources", [])}
    lines = ["flowchart TD"]
    lines += [f"    %% symbolic source key for {x['step']}: review only"
              for x in ir.get("symbolic_sources", [])]
    for s in ir["steps"]:
        mark = " symbolic" if s["id"] in symbolic else ""
        lines.append(f'    {node_id(s["id"])}["{s["id"]}<br/>{s["action"]}{mark} {s["key"][:8]}"]')
    for s in ir["steps"]:
        for role, src in s["inputs"].items():
            arrow = "-.->" if s["action"] == "elided" else "-->"
            label = "" if role == "model" else f"|{role}|"
            lines.append(f"    {node_id(src)} {arrow}{label} {node_id(s['id'])}")
    lines += ["    classDef elided stroke-dasharray: 5 5,color:#888",
              "    classDef cached fill:#ddd,stroke:#999"]
    for action in ("elided", "cached"):
        ids = [node_id(s["id"]) for s in ir["steps"] if s["action"] == action]
        if ids:
            lines.append(f"    class {','.join(ids)} {action}")
    return "\n".join(lines) + "\n"
