"""Work that many jobs of a sweep share, done once: a memo that lives for one planning session
(`with session(): ...`), keyed by the frozen content of what the work reads. Outside a session
every call computes afresh, as planning a single config always does.

Within a session nothing a memoised function reads may change (the checkpoints, the store
index, the config tree): `modelplan plan -m` reads them once, like one plan does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_tables: ContextVar[dict[str, dict[Any, Any]] | None] = ContextVar("memo_tables", default=None)


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


def frozen(value: Any) -> str:
    """A key for JSON-like content: equal content, equal key; 1, 1.0 and true stay apart
    (as they do in a plan's JSON and keys), which Python's own equality would merge."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def remembered(kind: str, key: Any, compute: Callable[[], T]) -> T:
    """compute(), once per (kind, key) in the session; its error, too, is given again."""
    tables = _tables.get()
    if tables is None:
        return compute()
    table = tables.setdefault(kind, {})
    if key in table:
        hit = table[key]
        if isinstance(hit, _Raised):
            raise hit.exc
        return hit  # type: ignore[no-any-return]
    try:
        table[key] = value = compute()
    except Exception as exc:
        table[key] = _Raised(exc)
        raise
    return value
