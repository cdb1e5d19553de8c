"""What a step's process does to itself (executors/run/forkserver.py forks it): its name, its
signals, its death with its parent, how it maps large blocks, and the memory it measures of
itself (its peak resident set, reset per step in a warm worker)."""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from pathlib import Path


def peak_mb() -> float:
    """This process's peak RSS since it started or since `_reset_peak`."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def reset_peak() -> None:
    """Start a new peak RSS here (Linux: clear_refs 5), so a worker reports each step's own."""
    with suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def rss_mb() -> float:
    import resource

    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize() / 2**20
    except (OSError, ValueError, IndexError):
        return peak_mb()


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MAP_THRESHOLD = 1 << 20  # blocks from 1 MiB are mapped on their own and unmapped when freed


def set_up(step_id: str) -> None:
    """Ignore SIGINT (the parent decides what an interrupt does), take the step's name, ask
    the kernel to kill this process when its parent (the fork server) exits, and map every
    large block on its own, so that what a step frees goes back to the system (glibc would
    raise its threshold after the first large free and keep later blocks in its heap)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    name(step_id)
    with suppress(OSError, AttributeError):  # not Linux: the parent still kills its children
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        libc.mallopt(M_MMAP_THRESHOLD, MAP_THRESHOLD)
    if os.getppid() == 1:  # the parent is already gone
        os._exit(1)


def name(step_id: str) -> None:
    """`ps` and `top` show this process as `mp:<step id>`."""
    with suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(15, f"mp:{step_id}".encode()[:15])  # SET_NAME
