"""The store path a config (`store.path`) or `--store` names, checked before anything touches
it: a path the file system can take (docs/architecture.md §4; planner/core/storelayout.py
lays the store out below it)."""

from __future__ import annotations

import os
from pathlib import Path

from planner.errors import StoreError

NAME_MAX = 255                # bytes in one file name (Linux, macOS)
PATH_MAX = 4000               # bytes in a whole path, with room for `<key[:2]>/<key>/<file>`


def checked_store_path(text: str) -> Path:
    """A store path that the file system can take (checked before anything touches it)."""
    shown = text if len(text) <= 60 else f"{text[:40]}...{text[-12:]}"
    fix = "pass a usable --store DIR (or store.path=DIR)"
    if "\0" in text:
        raise StoreError(f"store {shown!r}: a path cannot contain a NUL character; {fix}")
    try:
        path = Path(text).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # e.g. ~user of an unknown user
        raise StoreError(f"store {shown}: cannot use this path ({exc}); {fix}") from exc
    longest = max((len(os.fsencode(p)) for p in path.parts), default=0)
    if longest > NAME_MAX:
        raise StoreError(f"store {shown}: a name in this path is {longest} bytes long, more "
                         f"than the {NAME_MAX} a file name may have; {fix}")
    if len(os.fsencode(str(path))) > PATH_MAX:
        raise StoreError(f"store {shown}: the path is too long ({len(str(path))} characters; "
                         f"at most {PATH_MAX}); {fix}")
    return path
