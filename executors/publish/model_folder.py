"""What makes an outputs folder a model folder that clients open on their own: the checkpoint's
config, tokenizer, preprocessor and generation files, a sentence-transformers model's module
files, and a model card (README.md) written from the run record.

The graph stays `model.onnx` at the folder's root, beside `config.json`: the layout of Optimum's
own ONNX exports, which Optimum's ORTModel classes and sentence-transformers' ONNX backend both
read from the root (`onnx/model.onnx` is where transformers.js looks; see docs/deliverables.md)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from executors.samples import checkpoint_dir
from executors.steps.bundle import CLIENT_FILES
from planner.models.lm_classes import unfed_towers
from planner.render.card import card

CARD = "README.md"
ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
MAX_MODULE_FILE = 64 * 2**20  # a module folder's file beyond this is a weight, not a setting
LICENSE = re.compile(r"^license:\s*([\w.-]+)\s*$", re.MULTILINE)


def fill(record: dict[str, Any], out_dirs: dict[str, Path], stage: Path,
         out_dir: Path) -> None:
    """Copy the client files the deliverable lacks into `stage` and write its card; every file
    added is named in record["published"] (as where it lands in `out_dir`)."""
    ckpt = checkpoint_dir(out_dirs.get("resolve"))
    for rel in client_files(ckpt) if ckpt is not None else []:
        dst = stage / rel
        if dst.exists():  # a bundle carries its own
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ckpt / rel, dst)
        record["published"][rel] = str(out_dir / rel)
    files = {f.relative_to(stage).as_posix(): f.stat().st_size
             for f in sorted(stage.rglob("*")) if f.is_file()}
    text = card(record, files, _license(ckpt), tuple(_unfed(ckpt, record)))
    (stage / CARD).write_text(text, encoding="utf-8")
    record["published"][CARD] = str(out_dir / CARD)


def _unfed(ckpt: Path | None, record: dict[str, Any]) -> list[str]:
    """The checkpoint's encoders of other inputs its text generation graphs leave out."""
    try:
        info = json.loads((ckpt / "config.json").read_text()) if ckpt is not None else {}
    except (OSError, ValueError):
        return []
    return unfed_towers(info, str(record["model"].get("task")))


def client_files(ckpt: Path) -> list[str]:
    """The checkpoint's files a client reads beside the graph (relative paths)."""
    names = [f for f in (*CLIENT_FILES, *ST_FILES) if (ckpt / f).is_file()]
    for folder in _module_folders(ckpt):
        names += [f.relative_to(ckpt).as_posix() for f in sorted((ckpt / folder).rglob("*"))
                  if f.is_file() and f.stat().st_size <= MAX_MODULE_FILE]
    return names


def _module_folders(ckpt: Path) -> list[str]:
    """The folders of a sentence-transformers model's modules after the first (Pooling,
    Dense, Normalize...): their settings; the first module is the graph itself."""
    try:
        listed = json.loads((ckpt / "modules.json").read_text())
    except (OSError, ValueError):
        return []
    out = []
    for entry in listed if isinstance(listed, list) else []:
        path = entry.get("path") if isinstance(entry, dict) else None
        folder = (ckpt / path).resolve() if path else None
        if folder is not None and folder.is_dir() and ckpt.resolve() in folder.parents:
            out.append(path)
    return out


def _license(ckpt: Path | None) -> str | None:
    """The license the checkpoint's own card declares in its metadata."""
    if ckpt is None:
        return None
    try:
        text = (ckpt / CARD).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not text.startswith("---"):
        return None
    found = LICENSE.search(text.split("---", 2)[1] if text.count("---") >= 2 else "")
    return found.group(1) if found else None
