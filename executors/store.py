"""The content-addressed store (DESIGN §4): `<root>/<key[:2]>/<key>/`, built in a temporary
directory, renamed into place only when complete, one file lock per key."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InternalError, StoreError
from planner.storelayout import MANIFEST, SUBDIRS, entry_dir

CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Entry:
    key: str
    path: Path
    manifest: dict[str, Any]

    @property
    def files(self) -> dict[str, str]:
        return self.manifest["files"]


class Store:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        try:
            for sub in SUBDIRS:
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store {self.root}: cannot create it ({exc.strerror}); "
                             "pass a writable --store DIR") from exc

    def entry_dir(self, key: str) -> Path:
        return entry_dir(self.root, key)

    def get(self, key: str) -> Entry | None:
        """The complete entry for `key`, or None. Incomplete entries never exist here."""
        path = self.entry_dir(key)
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        return Entry(key, path, manifest)

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        from filelock import FileLock

        with FileLock(str(self.root / "locks" / f"{key}.lock")):
            yield

    @contextmanager
    def building(self, key: str, meta: dict[str, Any]) -> Iterator[Path]:
        """A fresh temporary directory; on success it becomes the entry for `key`.

        The caller holds `lock(key)`. On any exception the temporary directory is removed,
        so a failed or killed build never leaves anything under the key."""
        tmp = self.root / "tmp" / f"{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            yield tmp
            self._seal(tmp, key, meta)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def discard_leftovers(self, key: str) -> int:
        """Remove the temporary build dirs of `key` that killed builders left (on any machine
        sharing the store), when no one is building `key` now; how many were removed."""
        from filelock import FileLock, Timeout

        if not any((self.root / "tmp").glob(f"{key}.*")):
            return 0
        try:  # builders hold the key's lock while their dir exists: a free lock means stale
            with FileLock(str(self.root / "locks" / f"{key}.lock"), timeout=0):
                stale = list((self.root / "tmp").glob(f"{key}.*"))
                for path in stale:
                    shutil.rmtree(path, ignore_errors=True)
                return len(stale)
        except Timeout:
            return 0

    def _seal(self, tmp: Path, key: str, meta: dict[str, Any]) -> None:
        files = {p.relative_to(tmp).as_posix(): file_sha256(p)
                 for p in sorted(tmp.rglob("*")) if p.is_file()}
        manifest = {"key": key, **meta, "files": files, "created": time.time()}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        final = self.entry_dir(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(tmp, final)  # atomic on one filesystem; the entry appears whole

    # -- maintenance ---------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        out = []
        for shard in sorted(self.root.glob("[0-9a-f][0-9a-f]")):
            for path in sorted(shard.iterdir()):
                entry = self.get(path.name)
                if entry is not None:
                    out.append(entry)
        return out

    def verify(self, entry: Entry) -> list[str]:
        """Problems found by re-hashing an entry's files against its manifest."""
        problems = []
        for rel, digest in entry.files.items():
            p = entry.path / rel
            if not p.is_file():
                problems.append(f"{rel}: missing")
            elif file_sha256(p) != digest:
                problems.append(f"{rel}: content does not match its digest")
        return problems

    def remove(self, key: str) -> None:
        path = self.entry_dir(key)
        if path.exists():
            trash = self.root / "tmp" / f"{key}.removed.{uuid.uuid4().hex[:8]}"
            os.rename(path, trash)  # disappears atomically, then is deleted
            shutil.rmtree(trash, ignore_errors=True)

    def size(self, entry: Entry) -> int:
        return sum((entry.path / rel).stat().st_size for rel in entry.files
                   if (entry.path / rel).is_file())

    # -- runs ----------------------------------------------------------------------------
    def save_run(self, record: dict[str, Any]) -> Path:
        """Keep a run record (it must match run.schema.json: a mismatch is a bug here)."""
        import schemas
        from schemas.validator import validate

        bad = validate(record, schemas.load("run"))
        if bad:
            raise InternalError(f"run record does not match run.schema.json at "
                                f"{'.'.join(map(str, bad[0].path))} ({bad[0].keyword}); this "
                                "is a modelplan bug: rerun with --debug and report it")
        path = self.root / "runs" / f"{record['run_id']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(path)
        return path

    def runs(self) -> list[dict[str, Any]]:
        out = []
        for p in sorted(self.root.glob("runs/*.json")):
            try:
                out.append(json.loads(p.read_text()))
            except (OSError, ValueError):
                continue
        return sorted(out, key=lambda r: r.get("started", ""))

    def stale_tmp(self) -> list[Path]:
        """Temporary build directories whose builder process is gone (killed or crashed)."""
        return [p for p in (self.root / "tmp").iterdir() if not _builder_alive(p.name)]


def _builder_alive(name: str) -> bool:
    parts = name.split(".")
    if len(parts) < 3 or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
