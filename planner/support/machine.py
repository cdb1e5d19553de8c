"""What this machine has: the memory available now (Linux's MemAvailable), and the user's cache
folder for modelplan."""

from __future__ import annotations

import os
from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def available_memory() -> int | None:
    """Bytes of memory available to a new process without swapping, or None where the
    system does not say (no /proc/meminfo)."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def user_cache_dir() -> Path:
    """modelplan's folder in the user's cache (`$XDG_CACHE_HOME`, else ~/.cache): where the
    default store and the build server live."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modelplan"
