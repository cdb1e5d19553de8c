"""Evaluation datasets at plan time: where `eval.dataset.path` points and the digest of its
content (the eval step's key holds it: same data and deliverable = cached, changed data =
re-evaluated).

A path is a local file (JSON Lines, JSON, CSV, Parquet), a local folder (a `save_to_disk`
dataset, an image or audio folder with one subfolder per class, or a folder of data files),
or a Hugging Face dataset id already in the local datasets or hub cache. Reads only files;
imports no ML library. Nothing is downloaded: an id that is not cached is one error line that
says how to make it available.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import ConfigError
from planner.models.hfcache import datasets_cache, hub_cache

SHIPPED = "shipped"          # eval=task without a dataset: the inputs modelplan ships
FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".tsv", ".txt")
DATA_SUFFIXES = (*FILE_SUFFIXES, ".arrow", ".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp",
                 ".tif", ".tiff", ".wav", ".flac", ".mp3", ".ogg", ".opus")
_ID = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"


@dataclass(frozen=True)
class Dataset:
    """A dataset as the planner found it: `kind` is file | folder | saved | hub_cache |
    shipped | symbolic; `where` the file or folder that is read; `digest` its content's."""

    kind: str
    where: str | None
    digest: str


def looks_like_id(path: str) -> bool:
    """`org/name` or `name`, nothing a local path would start with."""
    parts = path.split("/")
    return (0 < len(parts) <= 2 and all(p and set(p) <= set(_ID) for p in parts)
            and not path.startswith((".", "~")))


def cached_copy(dataset_id: str) -> Path | None:
    """The local copy of a hub dataset: its hub-cache snapshot (data files, read by the
    `datasets` library offline) or its folder in the datasets cache (Arrow files)."""
    repo = hub_cache() / ("datasets--" + dataset_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    if ref.is_file():
        snap = repo / "snapshots" / ref.read_text().strip()
        if snap.is_dir():
            return snap
    built = datasets_cache() / dataset_id.replace("/", "___")
    return built if built.is_dir() and any(built.rglob("*.arrow")) else None


def locate(path: str | None, name: str | None = None) -> tuple[str, Path | None]:
    """(kind, what is read) for `eval.dataset.path` (its subset: `name`), or one error line
    with a fix."""
    if path is None:
        if name is not None:
            raise ConfigError(f"eval.dataset.name: {name!r} names a subset of a dataset, and "
                              "eval.dataset.path names none; set eval.dataset.path, or "
                              "eval.dataset.name=null")
        return SHIPPED, None
    local = Path(path).expanduser()
    if local.exists() and not local.is_file() and not local.is_dir():
        raise ConfigError(f"eval.dataset.path: '{path}' is not a regular file or folder (a "
                          "device or a pipe); point it at a dataset file or folder")
    if local.is_file():
        if local.suffix.lower() not in FILE_SUFFIXES:
            raise ConfigError(f"eval.dataset.path: '{path}' is a {local.suffix or 'suffixless'} "
                              f"file; use JSON Lines, JSON, CSV or Parquet "
                              f"({', '.join(FILE_SUFFIXES[:4])}) or a folder")
        if local.suffix.lower() == ".parquet" and not _parquet(local):
            raise ConfigError(f"eval.dataset.path: '{path}' is named .parquet but is not a "
                              "Parquet file (no PAR1 marks); give the file its own suffix")
        _no_subset(name, path)
        return "file", local.resolve()
    if local.is_dir():
        saved = (local / "dataset_info.json").is_file() or (local / "dataset_dict.json").is_file()
        if not saved and not any(p.is_file() for p in local.rglob("*")):
            raise ConfigError(f"eval.dataset.path: '{path}' is an empty folder; point it at a "
                              "dataset (data files, a save_to_disk folder or an image folder)")
        if not saved and not any(p.suffix.lower() in DATA_SUFFIXES for p in local.rglob("*")
                                 if p.is_file()):
            raise ConfigError(f"eval.dataset.path: '{path}' holds no data files (JSON Lines, "
                              "CSV, Parquet, images or audio); point it at a dataset folder")
        if saved:  # a save_to_disk folder is one dataset (a plain folder may name configs)
            _no_subset(name, path)
        return ("saved" if saved else "folder"), local.resolve()
    if looks_like_id(path):
        copy = cached_copy(path)
        if copy is not None:
            return "hub_cache", copy
        args = f"'{path}'" + (f", '{name}'" if name else "")
        raise ConfigError(
            f"eval.dataset.path: '{path}' is neither a local file or folder nor a dataset in "
            f"the local cache ({hub_cache()}, {datasets_cache()}) and this machine works "
            f"offline; where there is network, save it with `datasets.load_dataset({args})"
            f".save_to_disk(DIR)`, copy DIR here and set eval.dataset.path=DIR (or eval=none)")
    raise ConfigError(f"eval.dataset.path: '{path}' does not exist; point it at a local "
                      "dataset file or folder, or set it to null for the shipped inputs")


def _parquet(path: Path) -> bool:
    """Whether a file carries Parquet's marks (PAR1 at its start and its end)."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
            f.seek(-4, 2)
            return head == b"PAR1" and f.read(4) == b"PAR1"
    except OSError:
        return False


def _no_subset(name: str | None, path: str) -> None:
    """A local file or folder has no named subsets (a hub dataset's configs)."""
    if name is not None:
        raise ConfigError(f"eval.dataset.name: {name!r} names a subset of a hub dataset, and "
                          f"'{path}' is a local dataset, which has none; set "
                          "eval.dataset.name=null")


def read(ev: dict[str, Any], memo: Any, symbolic: bool = False) -> Dataset:
    """Locate and digest the eval dataset. symbolic: a dataset that cannot be read here gets
    a digest of its name instead (plans reviewed on a machine without the data)."""
    path = ev["dataset"]["path"]
    try:
        kind, where = locate(path, ev["dataset"]["name"])
    except ConfigError:
        if not symbolic:
            raise
        named = hashlib.sha256(f"modelplan-symbolic-dataset\0{path}".encode()).hexdigest()
        return Dataset("symbolic", path, named)
    if where is None:
        return Dataset(kind, None, SHIPPED)
    return Dataset(kind, str(where), memo.tree_digest(where))
