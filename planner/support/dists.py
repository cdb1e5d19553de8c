"""The installed distributions and their versions, read from the names of the *.dist-info
folders on sys.path (importlib.metadata gives the same answer, but its import and its parsing
of each METADATA file cost more than a whole plan, or than a build-server client's work)."""

from __future__ import annotations

import os
import re
import sys


def normalize(name: str) -> str:
    """A distribution's name as its dist-info folder and PEP 503 compare it."""
    return re.sub(r"[-_.]+", "_", name).lower()


def installed() -> dict[str, str]:
    """Version by normalized name of each distribution on sys.path (the first found, as
    importlib finds it), read now."""
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and "-" in name:
                dist, _, version = name[: -len(".dist-info")].partition("-")
                found.setdefault(normalize(dist), version)
    return found
