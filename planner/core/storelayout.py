"""Where the content-addressed store lives and how it is laid out (docs/architecture.md §4).

The planner reads the layout to mark steps `cached`; executors write entries into it
(executors/store/content.py). An entry exists only once complete: its manifest is written last,
inside a temporary directory that is then renamed to `<root>/<key[:2]>/<key>/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.config.storepath import checked_store_path
from planner.support.machine import user_cache_dir
from planner.support.memo import remembered

MANIFEST = "manifest.json"
RESULT = "result.json"        # a step's metrics, beside its outputs
WEIGHTS = "weights"           # an artifact's weight blobs, beside its graph (executors/store/weights.py)
QUARANTINE = "quarantine"     # corrupt or incomplete entries, moved aside for inspection
SUBDIRS = ("tmp", "locks", "runs", "leases")


def store_root(config: dict[str, Any]) -> Path:
    """The store: store.path, or the user cache dir."""
    path = config["store"]["path"]
    return remembered("store-root", path, lambda: _store_root(path))


def _store_root(path: str | None) -> Path:
    if path:
        return checked_store_path(path)
    return user_cache_dir() / "store"


def entry_dir(root: Path, key: str) -> Path:
    return root / key[:2] / key


def entry_complete(root: Path, key: str) -> bool:
    """A store entry exists only once fully built (it is renamed into place last)."""
    return (entry_dir(root, key) / MANIFEST).is_file()
