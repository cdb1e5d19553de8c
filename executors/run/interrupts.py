"""Ctrl-C and SIGTERM during a run: the first one raises `Interrupted` where the run is, so the
running step's cleanup runs (its child process is killed, its temporary output removed, its
lock released) and the run record is written; a second one exits at once (children killed
first). Nothing here can leave a half entry in the store: entries appear by rename only.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []  # the signals the handling block in force has received


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived during a run (a KeyboardInterrupt: `except Exception` in the
    step wrapper does not swallow it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


def caught(exc: KeyboardInterrupt) -> Interrupted:
    """The interrupt that `exc` carries. A library that checks signals itself while it waits
    (Ray's core worker) catches the handler's Interrupted and raises a plain
    KeyboardInterrupt in its place: the signal is the one the handler received."""
    if isinstance(exc, Interrupted):
        return exc
    return Interrupted(_received[-1] if _received else signal.SIGINT)


@contextmanager
def handling(exit_now: Callable[[], None]) -> Iterator[None]:
    """Within the block (main thread only, where Python delivers signals): the first SIGINT or
    SIGTERM raises Interrupted; a second calls `exit_now` and exits with 128 + the signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        seen.append(signum)
        _received.append(signum)
        if len(seen) > 1:
            exit_now()
            os._exit(128 + signum)
        raise Interrupted(signum)

    saved = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)
        _received.clear()
