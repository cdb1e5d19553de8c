"""The JSON Schemas of modelplan (draft 2020-12) and a tiny loader."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent
NAMES = ("config", "plan", "run")


@cache
def load(name: str) -> dict[str, Any]:
    """Return the parsed schema `<name>.schema.json` (config, plan or run)."""
    if name not in NAMES:
        raise KeyError(f"unknown schema {name!r}; known: {', '.join(NAMES)}")
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


def path(name: str) -> Path:
    """Filesystem path of a schema, for editors and other tools."""
    return SCHEMA_DIR / f"{name}.schema.json"
