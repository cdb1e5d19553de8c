"""Per-step peak memory and progress: a sampler thread tracks RSS and prints a heartbeat for
long steps."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Self

SAMPLE_S = 0.05
HEARTBEAT_S = 15.0


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


class StepMonitor:
    """Context manager: peak RSS (MB) and wall time of the enclosed block, with a heartbeat
    line on stderr every HEARTBEAT_S seconds (`label: still running (45 s)`)."""

    def __init__(self, label: str, quiet: bool = False) -> None:
        self.label = label
        self.quiet = quiet
        self.peak = 0.0
        self.wall = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Self:
        self._t0 = time.perf_counter()
        self.peak = rss_mb()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())
        self.wall = time.perf_counter() - self._t0

    def _sample(self) -> None:
        next_beat = time.perf_counter() + HEARTBEAT_S
        while not self._stop.wait(SAMPLE_S):
            self.peak = max(self.peak, rss_mb())
            now = time.perf_counter()
            if now >= next_beat and not self.quiet:
                print(f"  {self.label}: still running ({now - self._t0:.0f} s)", file=sys.stderr,
                      flush=True)
                next_beat = now + HEARTBEAT_S
