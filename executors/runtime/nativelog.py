"""Capture of what native code (ONNX Runtime, an EP library) prints, so a failure can be
reported in the runtime's own words."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def native_log() -> Iterator[list[str]]:
    """Capture what native code writes to fd 1 and fd 2 inside the block (the QNN backend
    prints to both); the lines are in the yielded list afterwards."""
    lines: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            lines.extend(tmp.read().decode(errors="replace").splitlines())


@contextmanager
def fd1_to_stderr() -> Iterator[None]:
    """Send what native code writes to fd 1 inside the block to fd 2."""
    import ctypes

    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # C stdio's buffer, before fd 1 is stdout again
        os.dup2(saved, 1)
        os.close(saved)
