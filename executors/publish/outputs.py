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
from executors.publish import model_folder, runtime_manifest
from executors.store.weights import WEIGHTS, blob_digest
from planner.core.ops import OPS
from planner.core.plan import MAIN_GRAPH, graph_of
from planner.core.storelayout import MANIFEST, RESULT
from planner.errors import IntegrityError
from planner.outputs import FAILED_RECORD, RUN_RECORD, failed_beside
from planner.support.atomic import write_atomic
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
    if step["id"] == deliverable:  # its files, its weights, its folders (a bundle's device/)
        return [f for f in sorted(src.iterdir()) if f.is_file() and f.name not in SKIP] + \
            sorted((src / WEIGHTS).glob("*")) + \
            sorted(f for d in src.iterdir() if d.is_dir() and d.name != WEIGHTS
                   and not d.name.startswith(".") for f in d.rglob("*") if f.is_file())
    names = {n for role in OPS[step["op"]].publish for n in ROLE_FILES[role]}
    return [src / n for n in sorted(names) if (src / n).is_file()]


def published_name(step_id: str, name: str) -> str:
    """A file's name in the outputs: prefixed with its graph when the model has several (weight
    blobs are named by their content: the graphs share `weights/`)."""
    graph = graph_of(step_id)
    return name if graph == MAIN_GRAPH or blob_digest(name) else f"{graph}_{name}"


def staging_dir(out_dir: Path) -> Path:
    """Where a run builds its outputs folder (and its uncached steps' outputs) beside the
    published one, which it replaces only when the run succeeds."""
    return out_dir.parent / f".{out_dir.name}.staging-{os.getpid()}"


def outputs(record: dict[str, Any], out_dirs: dict[str, Path], out_dir: Path,
            staging: Path | None = None) -> None:
    """Publish a run into `out_dir`. A successful run's folder is built in `staging` and then
    swapped in whole, so nothing of an earlier run stays; a failed run leaves a previous good
    deliverable as it is and writes its record beside it (run.failed.json), or with none to
    keep, beside the folder, which it does not make (`<name>.run.failed.json`)."""
    stage = staging or staging_dir(out_dir)
    record["published"] = {}
    if record["status"] != "ok":
        shutil.rmtree(stage, ignore_errors=True)
        for step in record["steps"]:  # what uncached steps wrote in the stage is gone with it
            step["outputs"] = {k: v for k, v in step["outputs"].items()
                               if stage not in Path(v).parents}
        _keep_failed(record, out_dir)
        return
    stage.mkdir(parents=True, exist_ok=True)
    try:
        _fill(record, out_dirs, out_dir, stage)
        _swap(stage, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    _remove_stale(out_dir)
    failed_beside(out_dir).unlink(missing_ok=True)  # an earlier failure's: this run delivered


def _fill(record: dict[str, Any], out_dirs: dict[str, Path], out_dir: Path,
          stage: Path) -> None:
    deliverable = record["deliverable"]
    chosen = [s for s in record["steps"] if s["id"] == deliverable]
    chosen += [s for s in record["steps"] if s["id"] != deliverable and OPS[s["op"]].publish]
    for step in chosen:
        src = out_dirs.get(step["id"])
        if src is None:
            continue
        for f in _published_files(step, src, deliverable):
            rel = f.relative_to(src).as_posix()
            name = published_name(step["id"], rel)
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            _copy_or_link(f, stage / name, out_dir / name, step["digests"].get(rel))
            record["published"][name] = str(out_dir / name)
    for step in record["steps"]:  # uncached steps built in the stage: name where they land
        step["outputs"] = {k: _moved(v, stage, out_dir) for k, v in step["outputs"].items()}
    runtime_manifest.write(record, stage, out_dir)
    model_folder.fill(record, out_dirs, stage, out_dir)
    metrics = {s["id"]: s["metrics"] for s in record["steps"] if s["metrics"]}
    (stage / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    (stage / RUN_RECORD).write_text(json.dumps(record, indent=2))


def _moved(path: str, stage: Path, out_dir: Path) -> str:
    p = Path(path)
    return str(out_dir / p.relative_to(stage)) if stage in p.parents else path


def _copy_or_link(src: Path, dst: Path, previous: Path, digest: str | None) -> None:
    """The previous run's copy when it is the same file (size and mtime), else a verified copy."""
    if previous.is_file():
        a, b = src.stat(), previous.stat()
        if a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns:
            try:
                os.link(previous, dst)
                return
            except OSError:
                pass
    _copy_if_changed(src, dst, digest)


def _swap(stage: Path, out_dir: Path) -> None:
    """Replace out_dir by stage: two renames on one file system (an interrupted swap leaves the
    old folder beside it as .NAME.old-PID, removed by the next successful run)."""
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    if out_dir.exists():
        out_dir.rename(old)
    stage.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def _remove_stale(out_dir: Path) -> None:
    """Staging and old folders that runs which no longer run left beside out_dir."""
    for p in out_dir.parent.glob(f".{out_dir.name}.*-*"):
        pid = p.name.rpartition("-")[2]
        if p.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _keep_failed(record: dict[str, Any], out_dir: Path) -> None:
    """A failed run's record: beside a previous good deliverable (run.failed.json), else beside
    the outputs folder, which it does not make: a folder holds a deliverable or nothing."""
    saved = out_dir / FAILED_RECORD if _holds_deliverable(out_dir) else failed_beside(out_dir)
    saved.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(saved, json.dumps(record, indent=2))


def _holds_deliverable(out_dir: Path) -> bool:
    try:
        previous = json.loads((out_dir / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(previous, dict) and previous.get("status") == "ok" \
        and bool(previous.get("published"))
