"""Render a plan as text, JSON, Markdown or Mermaid (all from the Plan IR dict)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.render import json_ir, markdown, mermaid, text

FORMATS: dict[str, Callable[[dict[str, Any]], str]] = {
    "text": text.render, "json": json_ir.render, "md": markdown.render, "mermaid": mermaid.render,
}


def render(ir: dict[str, Any], fmt: str) -> str:
    return FORMATS[fmt](ir)
