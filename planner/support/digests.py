"""The sha256 of a file, read in chunks."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20


def chunks(fh: BinaryIO) -> Iterator[bytes]:
    """A binary file's bytes, CHUNK at a time (the whole file never sits in memory)."""
    while chunk := fh.read(CHUNK):
        yield chunk


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in chunks(fh):
            h.update(chunk)
    return h.hexdigest()
