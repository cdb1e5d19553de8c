"""The Plan IR as canonical JSON: same plan, same bytes."""

from __future__ import annotations

import json
from typing import Any


def render(ir: dict[str, Any]) -> str:
    return json.dumps(ir, indent=2, ensure_ascii=False) + "\n"
