"""A step that runs out of disk space: recognised by its error (ENOSPC or EDQUOT, from Python,
from a native library's message, or from a child process), and reported as one line naming the
store, the step, the space it needs (estimated from its inputs) and the space that is free."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

from planner.errors import StepError
from planner.support.units import human_bytes

CODES = (errno.ENOSPC, errno.EDQUOT)
# How native libraries word it: strerror, and Rust's io::Error (safetensors, tokenizers).
MESSAGES = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")
GROWTH = 2    # a step's output plus its temporary files: about twice its inputs
MIN_NEED = 1 << 20


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, says the disk is full."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in CODES:
            return True
        if any(m in str(exc) for m in MESSAGES):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def disk_full_error(where: Path, what: str, step: dict[str, Any],
                    inputs: dict[str, Path]) -> StepError:
    """The one line for a step that ran out of space in `where` (`what`: "the store")."""
    read = _read_by(step, inputs)
    need = max(GROWTH * sum(_size(p) for p in read), MIN_NEED)
    basis = "twice its inputs" if inputs else "twice its source" if read else "at least"
    try:
        free = f"{human_bytes(shutil.disk_usage(where).free)} is free there now"
    except OSError:
        free = "the free space there is unknown"
    return StepError(
        f"step {step['id']} ({step['op']}): {what} {where} ran out of disk space; the step "
        f"needs about {human_bytes(need)} ({basis}) and {free}; its temporary output "
        f"was removed; free space there or pass --store DIR on a larger disk, then run again")


def _read_by(step: dict[str, Any], inputs: dict[str, Path]) -> list[Path]:
    """What the step reads: its inputs' store entries, or (a source) the files it names."""
    if inputs:
        return list(inputs.values())
    path = step["params"].get("path")
    return [Path(path)] if path else []


def _size(path: Path) -> int:
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return 0
