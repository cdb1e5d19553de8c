"""Python's cycle collector, paused while many objects are made that all stay alive."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off within the block. A sweep's plans stay alive until it is
    printed, and the collector's full passes over that growing heap found nothing to free
    while taking 40 % of a 10,000-job `plan -m` (benchmarks/plan_bench.py --jobs)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
