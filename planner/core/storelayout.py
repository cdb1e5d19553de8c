"""Where the content-addressed store lives and how it is laid out (DESIGN §4).

The planner reads the layout to mark steps `cached`; executors write entries into it
(executors/store/content.py). An entry exists only once complete: its manifest is written last,
inside a temporary directory that is then renamed to `<root>/<key[:2]>/<key>/`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from planner.errors import StoreError

MANIFEST = "manifest.json"
RESULT = "result.json"        # a step's metrics, beside its outputs
WEIGHTS = "weights"           # an artifact's weight blobs, beside its graph (executors/store/weights.py)
QUARANTINE = "quarantine"     # corrupt or incomplete entries, moved aside for inspection
SUBDIRS = ("tmp", "locks", "runs", "leases")
NAME_MAX = 255                # bytes in one file name (Linux, macOS)
PATH_MAX = 4000               # bytes in a whole path, with room for `<key[:2]>/<key>/<file>`


def store_root(config: dict[str, Any]) -> Path:
    """The store: store.path, or the user cache dir."""
    if config["store"]["path"]:
        return checked_store_path(config["store"]["path"])
    base = Path.home() / ".cache"
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        base = Path(xdg)
    return base / "modelplan" / "store"


def checked_store_path(text: str) -> Path:
    """A store path that the file system can take (checked before anything touches it)."""
    shown = text if len(text) <= 60 else f"{text[:40]}...{text[-12:]}"
    fix = "pass a usable --store DIR (or store.path=DIR)"
    if "\0" in text:
        raise StoreError(f"store {shown!r}: a path cannot contain a NUL character; {fix}")
    try:
        path = Path(text).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # e.g. ~user of an unknown user
        raise StoreError(f"store {shown}: cannot use this path ({exc}); {fix}") from exc
    longest = max((len(os.fsencode(p)) for p in path.parts), default=0)
    if longest > NAME_MAX:
        raise StoreError(f"store {shown}: a name in this path is {longest} bytes long, more "
                         f"than the {NAME_MAX} a file name may have; {fix}")
    if len(os.fsencode(str(path))) > PATH_MAX:
        raise StoreError(f"store {shown}: the path is too long ({len(str(path))} characters; "
                         f"at most {PATH_MAX}); {fix}")
    return path


def entry_dir(root: Path, key: str) -> Path:
    return root / key[:2] / key


def entry_complete(root: Path, key: str) -> bool:
    """A store entry exists only once fully built (it is renamed into place last)."""
    return (entry_dir(root, key) / MANIFEST).is_file()
