"""Elisions already re-checked: an elided step's premises are observed on its real input once
per input content. The memo is keyed by the elided step's key, the digests of its input's files
(verified on use) and the modelplan version, and lives in `<store>/proofs/`; only premises that
held are remembered, so a failed check always runs again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from planner import __version__
from planner.core.storelayout import MANIFEST
from planner.support.atomic import write_atomic

PROOFS = "proofs"


def memo_path(step: dict[str, Any], src_dir: Path) -> Path | None:
    """Where the check of `step` on the store entry `src_dir` is remembered (None: `src_dir`
    is not a store entry, so its content has no digest to key by)."""
    try:
        files = json.loads((src_dir / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError):
        return None
    raw = json.dumps([step["key"], files, __version__], sort_keys=True).encode()
    return src_dir.parent.parent / PROOFS / f"{hashlib.sha256(raw).hexdigest()}.json"


def held_before(memo: Path | None) -> bool:
    return memo is not None and memo.is_file()


def remember(memo: Path | None, detail: str) -> None:
    if memo is None:
        return
    try:
        memo.parent.mkdir(exist_ok=True)
        write_atomic(memo, json.dumps({"held": True, "detail": detail}))
    except OSError:
        pass  # only a speed-up
