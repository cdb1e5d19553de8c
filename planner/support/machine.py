"""What this machine has: the memory available now (Linux's MemAvailable)."""

from __future__ import annotations

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
