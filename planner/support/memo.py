"""Work that many jobs of a sweep share, done once: a memo that lives for one planning session
(`with session(): ...`), keyed by the frozen content of what the work reads. Outside a session
every call computes afresh, as planning a single config always does.

Within a session nothing a memoised function reads may change (the checkpoints, the store
index, the config tree): `modelplan plan -m` reads them once, like one plan does.
"""

from __future__ import annotations

import json
import marshal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_tables: ContextVar[dict[str, dict[Any, Any]] | None] = ContextVar("memo_tables", default=None)


_MISSING = object()


class _Raised:
    """A memoised failure: the same error for every job that asks the same question."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


@contextmanager
def session() -> Iterator[dict[str, dict[Any, Any]]]:
    """Memoise within the block (nested sessions share the outer one's tables)."""
    if _tables.get() is not None:
        yield _tables.get()  # type: ignore[misc]
        return
    tables: dict[str, dict[Any, Any]] = {}
    token = _tables.set(tables)
    try:
        yield tables
    finally:
        _tables.reset(token)


def active() -> bool:
    return _tables.get() is not None


def frozen(value: Any) -> bytes:
    """A key for JSON-like content: equal keys mean equal content, and 1, 1.0 and true stay
    apart (as they do in a plan's JSON and keys), which Python's own equality would merge.
    marshal's format 2 (no back-references, so the bytes depend only on the content and the
    order of mapping keys) is ten times as fast as canonical JSON; the same content in another
    key order is only a miss. What marshal cannot write is keyed by its canonical JSON."""
    try:
        return marshal.dumps(value, 2)
    except ValueError:
        return b"json:" + json.dumps(value, sort_keys=True, separators=(",", ":"),
                                     default=repr).encode()


def copied(node: Any) -> Any:
    """A copy of JSON-like content whose dicts and lists are new (what a memoised result is
    handed out as when its reader may change it), as deepcopy makes it, five times as fast."""
    if type(node) is dict:
        return {k: copied(v) for k, v in node.items()}
    if type(node) is list:
        return [copied(v) for v in node]
    return node


def remembered(kind: str, key: Any, compute: Callable[[], T]) -> T:
    """compute(), once per (kind, key) in the session; its error, too, is given again."""
    tables = _tables.get()
    if tables is None:
        return compute()
    table = tables.get(kind)
    if table is None:
        table = tables[kind] = {}
    hit = table.get(key, _MISSING)  # one lookup: a key's hash can cost more than the lookup
    if hit is not _MISSING:
        if type(hit) is _Raised:
            raise hit.exc
        return hit  # type: ignore[no-any-return]
    try:
        table[key] = value = compute()
    except Exception as exc:
        table[key] = _Raised(exc)
        raise
    return value
