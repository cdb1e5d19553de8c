"""The memory of a process tree as the machine sees it: the summed PSS of a process and all its
descendants (each shared page divided among the processes mapping it, so a weight file mapped
by two workers counts once), with the summed RSS beside it (which counts it once per process),
both read from /proc/<pid>/smaps_rollup.

    sampler = TreeMemory(pid)          # samples every `interval` s on its own thread
    ...
    peak = sampler.stop()              # {"pss": bytes, "rss": bytes} at the PSS peak
    sampler.samples                    # [(seconds since start, pss, rss), ...]
"""

from __future__ import annotations

import threading
import time
from pathlib import Path


def tree(root: int) -> list[int]:
    """`root` and every process descending from it (read from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def rollup(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in bytes; (0, 0) once it has gone."""
    pss = rss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
            elif line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0, 0
    return pss, rss


def tree_memory(root: int) -> tuple[int, int]:
    """(summed PSS, summed RSS) of the process tree under `root`, in bytes."""
    pss = rss = 0
    for pid in tree(root):
        p, r = rollup(pid)
        pss, rss = pss + p, rss + r
    return pss, rss


class TreeMemory:
    """Samples a process tree's summed PSS and RSS every `interval` s until `stop()`, with the
    trees under the pids in `also` summed in (a server that runs the command's work)."""

    def __init__(self, pid: int, interval: float = 0.1, also: tuple[int, ...] = ()) -> None:
        self.pid, self.interval, self.t0 = pid, interval, time.perf_counter()
        self.also = also
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            pss, rss = tree_memory(self.pid)
            for pid in self.also:
                p, r = tree_memory(pid)
                pss, rss = pss + p, rss + r
            self.samples.append((time.perf_counter() - self.t0, pss, rss))
            self._stop.wait(self.interval)

    def peak(self, start: float = 0.0, end: float = float("inf")) -> dict[str, int]:
        """The highest summed PSS between `start` and `end` (seconds since the sampler began),
        and the highest summed RSS over the same window."""
        window = [(p, r) for t, p, r in self.samples
                  if start - self.interval <= t <= end + self.interval]
        return {"pss": max((p for p, _ in window), default=0),
                "rss": max((r for _, r in window), default=0)}

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.peak()
