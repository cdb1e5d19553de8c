"""The content-addressed store (docs/architecture.md §4): `<root>/<key[:2]>/<key>/`, built in
a temporary directory, renamed into place only when complete, one file lock per key.

An entry is verified on use (`lookup`): each file is re-hashed against its manifest digest
unless its (size, mtime_ns, inode) still match the manifest's record of its last verification,
so a cached run costs a stat per file. A corrupt or incomplete entry is moved aside to
`<root>/quarantine/` (kept for inspection) and its step is rebuilt."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executors.store.weights import POOL, WEIGHTS, blob_digest, link_or_copy, pool_path, same_file
from planner.core.storelayout import MANIFEST, QUARANTINE, SUBDIRS, entry_dir
from planner.errors import InternalError, StoreError
from planner.support.atomic import write_atomic
from planner.support.digests import file_sha256

INCOMPLETE = f"{MANIFEST}: missing or unreadable (an incomplete entry)"


@dataclass
class Entry:
    key: str
    path: Path
    manifest: dict[str, Any]

    @property
    def files(self) -> dict[str, str]:
        return self.manifest["files"]


@dataclass
class Repair:
    """A corrupt or incomplete entry, moved aside so that its step is rebuilt."""

    problems: list[str]
    moved_to: Path

    def record(self) -> dict[str, Any]:
        return {"problems": self.problems, "moved_to": str(self.moved_to)}


def file_stamp(path: Path) -> list[int]:
    """What says a file is unchanged since it was last verified: size, mtime_ns, inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


class Store:
    def __init__(self, root: Path, writable: bool = True) -> None:
        """The store at `root`, created if need be. writable: check now, before any step
        runs, that entries can be written there (one clear error instead of a failed step)."""
        self.root = Path(root)
        self.sealed: dict[str, Entry] = {}  # entries this process just built, by key
        try:
            for sub in SUBDIRS:
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            if writable:
                probe = self.root / "tmp" / f".probe.{os.getpid()}.{uuid.uuid4().hex[:8]}"
                probe.mkdir()
                probe.rmdir()
        except OSError as exc:
            raise StoreError(f"store {self.root}: cannot write there ({_why(exc, self.root)}); pass a "
                             "writable --store DIR (or store.path=DIR)") from exc

    def entry_dir(self, key: str) -> Path:
        return entry_dir(self.root, key)

    @property
    def pool(self) -> Path:
        """The weight blobs of all entries, once each (executors/store/weights.py)."""
        return self.root / POOL

    def get(self, key: str) -> Entry | None:
        """The complete entry for `key`, or None. Incomplete entries never exist here."""
        path = self.entry_dir(key)
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        return Entry(key, path, manifest)

    def lookup(self, key: str) -> tuple[Entry | None, Repair | None]:
        """The entry for `key` if it is complete and intact. A corrupt or incomplete one is
        moved aside: (None, the repair); nothing there: (None, None)."""
        entry = self.get(key)
        if entry is not None and not self.check(entry):
            return entry, None
        if entry is None and not self.entry_dir(key).exists():
            return None, None
        with self.lock(key):  # its builder may be renaming a fresh entry into place
            return self.lookup_locked(key)

    def lookup_locked(self, key: str) -> tuple[Entry | None, Repair | None]:
        """lookup() for a caller that holds lock(key)."""
        entry = self.get(key)
        if entry is None and not self.entry_dir(key).exists():
            return None, None
        problems = self.check(entry) if entry is not None else [INCOMPLETE]
        if not problems:
            return entry, None
        return None, self._quarantine(key, problems)

    def check(self, entry: Entry) -> list[str]:
        """Problems with an entry's files. A file is re-hashed only when its stamp differs
        from its last verification; one that still matches its digest is re-stamped."""
        stamps = entry.manifest.get("verified", {})
        problems, fresh = [], {}
        for rel, digest in entry.files.items():
            try:
                stamp = file_stamp(entry.path / rel)
            except OSError:
                problems.append(f"{rel}: missing")
                continue
            if stamps.get(rel) == stamp:
                continue
            if rel in stamps and stamps[rel][0] != stamp[0]:
                problems.append(f"{rel}: {stamp[0]} bytes, {stamps[rel][0]} when stored")
            elif file_sha256(entry.path / rel) != digest:
                problems.append(f"{rel}: content does not match its digest")
                self._evict_blob(entry.path / rel)
            else:
                fresh[rel] = stamp
        if fresh and not problems:
            self._restamp(entry, fresh)
        return problems

    def _evict_blob(self, path: Path) -> None:
        """A corrupt blob leaves the pool too, so that no rebuild links it again."""
        digest = blob_digest(f"{path.parent.name}/{path.name}")
        if digest is not None and same_file(path, pool_path(self.pool, digest)):
            pool_path(self.pool, digest).unlink(missing_ok=True)

    def _restamp(self, entry: Entry, fresh: dict[str, list[int]]) -> None:
        entry.manifest["verified"] = {**entry.manifest.get("verified", {}), **fresh}
        with suppress(OSError):  # a read-only store: it is verified again next time
            write_atomic(entry.path / MANIFEST, json.dumps(entry.manifest, indent=2,
                                                           sort_keys=True))

    def _quarantine(self, key: str, problems: list[str]) -> Repair:
        """Move a bad entry to <root>/quarantine/, with why, for inspection."""
        moved = self.root / QUARANTINE / f"{key}.{time.strftime('%Y%m%dT%H%M%S')}." \
            f"{uuid.uuid4().hex[:6]}"
        moved.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.entry_dir(key), moved)
        with suppress(OSError):
            (moved / "quarantined.txt").write_text("\n".join(problems) + "\n")
        return Repair(problems, moved)

    def quarantined(self) -> list[Path]:
        return sorted(p for p in (self.root / QUARANTINE).glob("*") if p.is_dir())

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        from filelock import FileLock

        with FileLock(str(self.root / "locks" / f"{key}.lock")):
            yield

    @contextmanager
    def building(self, key: str, meta: dict[str, Any]) -> Iterator[Path]:
        """A fresh temporary directory; on success it becomes the entry for `key`.

        The caller holds `lock(key)`. On any exception the temporary directory is removed,
        so a failed or killed build never leaves anything under the key. The new entry is
        then `sealed[key]` (its manifest as written: no second read)."""
        tmp = self.root / "tmp" / f"{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            yield tmp
            self.sealed[key] = self._seal(tmp, key, meta)
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

    def _seal(self, tmp: Path, key: str, meta: dict[str, Any]) -> Entry:
        paths = {p.relative_to(tmp).as_posix(): p for p in sorted(tmp.rglob("*")) if p.is_file()}
        files = {rel: self._digest(rel, p) for rel, p in paths.items()}
        verified = {rel: file_stamp(p) for rel, p in paths.items()}  # renaming keeps them
        manifest = {"key": key, **meta, "files": files, "verified": verified,
                    "created": time.time()}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        final = self.entry_dir(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(tmp, final)  # atomic on one filesystem; the entry appears whole
        return Entry(key, final, manifest)

    def _digest(self, rel: str, path: Path) -> str:
        """A file's digest. A blob linked from the pool is known by its name (the pool holds
        only blobs whose content was hashed into their name); a new one joins the pool."""
        named = blob_digest(rel)
        if named is not None and same_file(path, pool_path(self.pool, named)):
            return named
        digest = file_sha256(path)
        if named is not None and named != digest:
            raise InternalError(f"weight blob {rel}: its content does not match its name; this "
                                "is a modelplan bug: rerun with --debug and report it")
        if named == digest:
            pooled = pool_path(self.pool, digest)
            pooled.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):
                link_or_copy(path, pooled)
        return digest

    # -- maintenance ---------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        out = []
        for shard in sorted(self.root.glob("[0-9a-f][0-9a-f]")):
            for path in sorted(shard.iterdir()):
                entry = self.get(path.name)
                if entry is not None:
                    out.append(entry)
        return out

    def verify(self, entry: Entry, seen: dict[tuple[int, int], str] | None = None) -> list[str]:
        """Problems found by re-hashing an entry's files against its manifest. `seen` (file
        identity -> digest) hashes a blob that several entries share once."""
        problems, seen = [], {} if seen is None else seen
        for rel, digest in entry.files.items():
            p = entry.path / rel
            if not p.is_file():
                problems.append(f"{rel}: missing")
                continue
            st = p.stat()
            ident = (st.st_dev, st.st_ino)
            if ident not in seen:
                seen[ident] = file_sha256(p)
            if seen[ident] != digest:
                problems.append(f"{rel}: content does not match its digest")
        return problems

    def verify_pool(self, seen: dict[tuple[int, int], str] | None = None) -> list[Path]:
        """Pool blobs whose content no longer matches the digest they are named by."""
        seen = {} if seen is None else seen
        bad = []
        for p in self.pool.glob("??/*"):
            st = p.stat()
            ident = (st.st_dev, st.st_ino)
            if ident not in seen:
                seen[ident] = file_sha256(p)
            if seen[ident] != p.name:
                bad.append(p)
        return sorted(bad)

    def drop_unreferenced_blobs(self, dry_run: bool = False) -> tuple[int, int]:
        """Remove pool blobs that no entry (nor a build under way) names: (count, bytes)."""
        named = {d for e in self.entries() for rel in e.files if (d := blob_digest(rel))}
        named |= {p.name for p in (self.root / "tmp").glob(f"*/{WEIGHTS}/*")}
        count = size = 0
        for p in self.pool.glob("??/*"):
            if p.name not in named:
                count, size = count + 1, size + p.stat().st_size
                if not dry_run:
                    p.unlink(missing_ok=True)
        return count, size

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
    def save_run(self, record: dict[str, Any]) -> Path | None:
        """Keep a run record (it must match run.schema.json: a mismatch is a bug here).
        None if the store cannot take it (a full disk): the run itself is not undone."""
        import schemas
        from schemas.validator import validate

        bad = validate(record, schemas.load("run"))
        if bad:
            raise InternalError(f"run record does not match run.schema.json at "
                                f"{'.'.join(map(str, bad[0].path))} ({bad[0].keyword}); this "
                                "is a modelplan bug: rerun with --debug and report it")
        path = self.root / "runs" / f"{record['run_id']}.json"
        try:
            write_atomic(path, json.dumps(record, indent=2))
        except OSError:
            return None
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


def _why(exc: OSError, root: Path) -> str:
    """An OSError in words; for "not a directory", the file that is in the way."""
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            return f"{blocker} is a file, not a directory"
    return exc.strerror or str(exc)


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
