"""Write a file whole or not at all."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Write `text` (or its pieces, in order) to a temporary file beside `path`, then rename
    it over `path` (atomic on one file system): a reader sees the old file or the new one,
    never a part. The temporary file is removed if anything fails; the error is the caller's
    to handle."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.writelines([text] if isinstance(text, str) else text)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
