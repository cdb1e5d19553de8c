"""Composed configs remembered between commands by the build server (planner/cli/serve.py).

A compose of the packaged tree reads the overrides, conf/ and, through `${oc.env:NAME}`, the
environment. The server is keyed by conf/ (and the code and libraries), so within one server a
compose is a function of the overrides and of the variables the config reads: an entry is kept
under the overrides and holds the values of the variables it read, and is used only while they
are the same. A config that calls any other resolver that reads the world (`${now:...}`,
`${hydra:...}`, one a plugin registers) is never kept, nor is a compose with user config
directories (their files are not in the server's key).

The cache is off until `enable` names where an entry goes: the server keeps its own entries in
this module's memory, and the commands it forks send theirs to it, so that the next fork has
them. An entry is JSON: each hit reads a fresh copy that the command may change.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from planner.config.conftree import CONF_DIR, ConfigTree

MAX_ENTRIES = 256
MAX_BYTES = 16 << 20  # a server keeps at most this much of them
# OmegaConf's resolvers that compute from the config alone
PURE_RESOLVERS = frozenset({"oc.select", "oc.dict.keys", "oc.dict.values", "oc.create",
                            "oc.decode", "oc.deprecated"})
RESOLVER = re.compile(r"\$\{\s*([\w.]+)\s*:")
ENV_READ = re.compile(r"\$\{\s*oc\.env\s*:\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*[,}]")

_entries: dict[str, str] = {}  # key -> {"env": {NAME: value or None}, "config": {...}}
_share: Callable[[str, str], None] | None = None


def enable(share: Callable[[str, str], None] | None = None) -> None:
    """Remember composes from now on; `share(key, entry)` takes each new entry (default: this
    process keeps it)."""
    global _share
    _share = share or learn


def disable() -> None:
    global _share
    _share = None
    _entries.clear()


def learn(key: str, entry: str) -> None:
    """Keep an entry (the oldest go when there are more than MAX_ENTRIES, or MAX_BYTES)."""
    _entries.pop(key, None)
    _entries[key] = entry
    while len(_entries) > MAX_ENTRIES or sum(map(len, _entries.values())) > MAX_BYTES:
        _entries.pop(next(iter(_entries)))


def cache_key(overrides: Iterable[str], tree: ConfigTree) -> str | None:
    """The key of a compose, or None when it is not cached (off, or user config dirs)."""
    if _share is None or not tree.packaged_only:
        return None
    return json.dumps([tree.config_name, *overrides])


def recall(overrides: Iterable[str], tree: ConfigTree) -> dict[str, Any] | None:
    """A fresh copy of the remembered config, if there is one and the environment variables it
    read still have the values they had."""
    key = cache_key(overrides, tree)
    entry = _entries.get(key) if key is not None else None
    if entry is None:
        return None
    data = json.loads(entry)
    if any(os.environ.get(name) != value for name, value in data["env"].items()):
        return None
    return data["config"]


def remember(overrides: list[str] | tuple[str, ...], tree: ConfigTree, unresolved: Any,
             config: dict[str, Any]) -> None:
    """Keep `config` (the compose of `overrides`; `unresolved` its DictConfig before
    resolution) when it depends on nothing but them, conf/ and the variables it reads."""
    key = cache_key(overrides, tree)
    if key is None:
        return
    from omegaconf import OmegaConf

    texts = [*overrides, *_strings(OmegaConf.to_container(unresolved, resolve=False)),
             *_packaged_texts()]
    names = env_reads(texts)
    if names is None:
        return
    try:
        entry = json.dumps({"env": {n: os.environ.get(n) for n in sorted(names)},
                            "config": config})
    except (TypeError, ValueError):
        return
    if json.loads(entry)["config"] != config:  # a key or value JSON would change
        return
    assert _share is not None
    _share(key, entry)


def env_reads(texts: Iterable[str]) -> set[str] | None:
    """The environment variables `texts` read through `${oc.env:NAME}`; None when they call a
    resolver that reads anything else, or read a variable whose name is computed."""
    names: set[str] = set()
    for text in texts:
        for found in RESOLVER.finditer(text):
            resolver = found.group(1)
            if resolver == "oc.env":
                literal = ENV_READ.match(text, found.start())
                if literal is None:
                    return None
                names.add(literal.group(1))
            elif resolver not in PURE_RESOLVERS:
                return None
    return names


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@cache
def _packaged_texts() -> tuple[str, ...]:
    """conf/'s files (their defaults lists may interpolate): the lines that interpolate."""
    return tuple(line for path in sorted(CONF_DIR.rglob("*.yaml"))
                 for line in path.read_text(encoding="utf-8").splitlines() if "${" in line)
