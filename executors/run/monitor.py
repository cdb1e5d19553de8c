"""Per-step peak memory and progress: a sampler thread tracks RSS and prints a heartbeat for
long steps. A step run in a child process is measured in that process (`watch`)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Any, Self

SAMPLE_S = 0.05
HEARTBEAT_S = 15.0


def rss_mb(process: Any = None) -> float:
    import psutil

    try:
        return (process or psutil.Process()).memory_info().rss / 2**20
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return 0.0  # the watched process has just ended


class StepMonitor:
    """Context manager: peak RSS (MB) and wall time of the enclosed block, with a heartbeat
    line on stderr every HEARTBEAT_S seconds (`label: still running (45 s)`)."""

    def __init__(self, label: str, quiet: bool = False) -> None:
        self.label = label
        self.quiet = quiet
        self.peak = 0.0
        self.wall = 0.0
        self.started = 0.0           # epoch seconds
        self.worker: str | None = None  # the worker process that ran the step, if any
        self._process: Any = None  # None: this process
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Self:
        self._t0 = time.perf_counter()
        self.started = time.time()
        self.peak = rss_mb()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        if self._process is None:
            self.peak = max(self.peak, rss_mb())
        self.wall = time.perf_counter() - self._t0

    def watch(self, pid: int, worker: str | None = None) -> None:
        """From now on the step runs in process `pid` (the warm worker `worker`): its memory
        is the step's memory."""
        import psutil

        with self._lock:
            self._process = psutil.Process(pid)
            self.peak = 0.0
            self.worker = worker

    def report(self, peak_mb: float) -> None:
        """The watched process's own high-water mark (exact, where sampling can miss a peak)."""
        with self._lock:
            self.peak = max(self.peak, peak_mb)

    def _sample(self) -> None:
        next_beat = time.perf_counter() + HEARTBEAT_S
        while not self._stop.wait(SAMPLE_S):
            with self._lock:
                self.peak = max(self.peak, rss_mb(self._process))
            now = time.perf_counter()
            if now >= next_beat and not self.quiet:
                print(f"  {self.label}: still running ({now - self._t0:.0f} s)", file=sys.stderr,
                      flush=True)
                next_beat = now + HEARTBEAT_S
