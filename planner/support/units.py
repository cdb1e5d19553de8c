"""Quantities as people read them and write them."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)
_POWER = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def parse_bytes(text: str | int) -> int | None:
    """A size as bytes: an integer, or a number with a unit (`16GB`, `512 MiB`, `1.5G`); the
    units are binary (GB = GiB = 2**30 bytes), as human_bytes prints them. None if unreadable."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _SIZE.match(str(text))
    if match is None:
        return None
    return int(float(match[1]) * 1024 ** _POWER[match[2].upper()])
