"""Leases: the store entries a running run holds, which `modelplan store gc` never removes.

A run writes `<store>/leases/<pid>.<random>.json`, the keys it will read or build, and holds an
exclusive lock on that file until it ends (the kernel drops the lock if the run dies). gc reads
every lease whose lock is still held and keeps its keys; a lease whose lock is free is left
over from a dead run and is removed. Leases are written under the store's gc lock (shared) and
gc scans and removes under it (exclusive): a run that starts while gc removes entries waits
until gc is done and then sees the store as gc left it, so gc never removes an entry a run is
building or is about to read.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Self

LEASES = "leases"
GC_LOCK = "gc.lock"


@contextmanager
def gc_lock(root: Path, exclusive: bool) -> Iterator[None]:
    """The store's gc lock: shared by runs registering keys, exclusive for gc."""
    with (root / "locks" / GC_LOCK).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Lease:
    """Context manager: the keys this run holds in the store at `root` (see the module doc)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.path = self.root / LEASES / f"{os.getpid()}.{uuid.uuid4().hex[:8]}.json"
        self.keys: set[str] = set()
        self._fh: IO[str] | None = None

    def __enter__(self) -> Self:
        self.path.parent.mkdir(exist_ok=True)
        with gc_lock(self.root, exclusive=False):
            self._fh = self.path.open("w")
            fcntl.flock(self._fh, fcntl.LOCK_EX)
        return self

    def hold(self, keys: Iterable[str]) -> None:
        """Add keys to the lease before the run reads or builds them."""
        new = set(keys) - self.keys
        if not new or self._fh is None:
            return
        self.keys |= new
        with gc_lock(self.root, exclusive=False):
            self._fh.seek(0)
            self._fh.truncate()
            self._fh.write(json.dumps(sorted(self.keys)))
            self._fh.flush()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fh is not None:
            self.path.unlink(missing_ok=True)
            self._fh.close()  # closing drops the lock
            self._fh = None


def held_keys(root: Path) -> tuple[set[str], int]:
    """The keys held by running runs, and how many runs hold them. The caller holds
    gc_lock(root, exclusive=True). Leases of runs that are gone are removed."""
    keys: set[str] = set()
    runs = 0
    for path in sorted((root / LEASES).glob("*.json")):
        with suppress(FileNotFoundError), path.open() as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # its run holds it
                runs += 1
                with suppress(ValueError):
                    keys |= set(json.loads(fh.read() or "[]"))
                continue
            path.unlink(missing_ok=True)  # nobody holds it: its run is gone
    return keys, runs
