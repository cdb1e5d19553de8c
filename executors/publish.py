"""Stable paths for a run's results: `outputs/<run-name>/` gets copies of the deliverable's
files (and the hierarchy sidecar) and the run record; store entries stay untouched."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from executors.base import SIDECAR

SKIP = {"manifest.json", "result.json", "source.json"}


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.is_file():
        a, b = src.stat(), dst.stat()
        if a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns:
            return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.copy2(src, tmp)
    tmp.replace(dst)


def outputs(record: dict[str, Any], out_dirs: dict[str, Path], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    published: dict[str, str] = {}
    deliverable = record["deliverable"]
    sources = [(deliverable, out_dirs.get(deliverable))]
    sources += [(s["id"], out_dirs.get(s["id"])) for s in record["steps"] if s["op"] == "export"]
    for step_id, src in sources:
        if src is None or record["status"] != "ok":
            continue
        for f in sorted(src.iterdir()):
            if f.is_file() and f.name not in SKIP and (step_id == deliverable or f.name == SIDECAR
                                                       or f.name.endswith(".md")):
                _copy_if_changed(f, out_dir / f.name)
                published[f.name] = str(out_dir / f.name)
    record["published"] = published
    metrics = {s["id"]: s["metrics"] for s in record["steps"] if s["metrics"]}
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    (out_dir / "run.json").write_text(json.dumps(record, indent=2))
