"""Stable paths for a run's results: `outputs/<run-name>/` gets copies of the deliverable's
files, the outputs that ops declare published (`Op.publish`, e.g. the export's hierarchy map),
the metrics and the run record; store entries stay untouched.

A file from the store is hashed as it is copied and published only if it matches the digest
its entry's manifest records: nothing unverified is ever published."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import ROLE_FILES, SOURCE
from executors.store.weights import WEIGHTS, blob_digest
from planner.core.ops import OPS
from planner.core.plan import MAIN_GRAPH, graph_of
from planner.core.storelayout import MANIFEST, RESULT
from planner.errors import IntegrityError
from planner.support.digests import chunks

SKIP = {MANIFEST, RESULT, SOURCE}


def _copy_if_changed(src: Path, dst: Path, digest: str | None) -> None:
    """Copy src to dst whole (and, given its digest, only if the bytes copied match it)."""
    if dst.is_file():
        a, b = src.stat(), dst.stat()
        if a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns:
            return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        copied = _copy_hashing(src, tmp)
        if digest is not None and copied != digest:
            raise IntegrityError(f"{src}: changed in the store since it was verified (its content "
                             f"does not match its digest), so it was not published; run again "
                             "to rebuild it")
        shutil.copystat(src, tmp)
        tmp.replace(dst)
    finally:
        tmp.unlink(missing_ok=True)


def _copy_hashing(src: Path, dst: Path) -> str:
    h = hashlib.sha256()
    with src.open("rb") as fin, dst.open("wb") as fout:
        for chunk in chunks(fin):
            h.update(chunk)
            fout.write(chunk)
    return h.hexdigest()


def _published_files(step: dict[str, Any], src: Path, deliverable: str) -> list[Path]:
    if step["id"] == deliverable:
        return [f for f in sorted(src.iterdir()) if f.is_file() and f.name not in SKIP] + \
            sorted((src / WEIGHTS).glob("*"))
    names = {n for role in OPS[step["op"]].publish for n in ROLE_FILES[role]}
    return [src / n for n in sorted(names) if (src / n).is_file()]


def published_name(step_id: str, name: str) -> str:
    """A file's name in the outputs: prefixed with its graph when the model has several (weight
    blobs are named by their content: the graphs share `weights/`)."""
    graph = graph_of(step_id)
    return name if graph == MAIN_GRAPH or blob_digest(name) else f"{graph}_{name}"


def outputs(record: dict[str, Any], out_dirs: dict[str, Path], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    before = _previously_published(out_dir)
    published: dict[str, str] = {}
    deliverable = record["deliverable"]
    chosen = [s for s in record["steps"] if s["id"] == deliverable]
    chosen += [s for s in record["steps"] if s["id"] != deliverable and OPS[s["op"]].publish]
    if record["status"] == "ok":
        for step in chosen:
            src = out_dirs.get(step["id"])
            if src is None:
                continue
            for f in _published_files(step, src, deliverable):
                rel = f.relative_to(src).as_posix()
                name = published_name(step["id"], rel)
                (out_dir / name).parent.mkdir(exist_ok=True)
                _copy_if_changed(f, out_dir / name, step["digests"].get(rel))
                published[name] = str(out_dir / name)
    record["published"] = published
    for name in before - set(published):  # the folder shows this run only
        (out_dir / name).unlink(missing_ok=True)
    metrics = {s["id"]: s["metrics"] for s in record["steps"] if s["metrics"]}
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    (out_dir / "run.json").write_text(json.dumps(record, indent=2))


def _previously_published(out_dir: Path) -> set[str]:
    """The file names the last run published into `out_dir` (its run.json says which)."""
    try:
        names = json.loads((out_dir / "run.json").read_text()).get("published") or {}
    except (OSError, ValueError, AttributeError):
        return set()
    return {n for n in names if isinstance(n, str) and n not in SKIP
            and ("/" not in n or blob_digest(n))}
