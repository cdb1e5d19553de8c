"""Python's cycle collector, paused while many objects are made that all stay alive."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(then_freeze: bool = False) -> Iterator[None]:
    """The cycle collector off within the block. A sweep's plans stay alive until it is
    printed, and the collector's full passes over that growing heap found nothing to free
    while taking 40 % of a 10,000-job `plan -m` (benchmarks/plan_bench.py --jobs).
    then_freeze: for a command that exits after the block, whatever lives then is left out of
    every later pass (gc.freeze), the first one after the block and the one at exit included
    (0.8 s each after a 10,000-job plan)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if then_freeze:
            gc.freeze()
        if was:
            gc.enable()
