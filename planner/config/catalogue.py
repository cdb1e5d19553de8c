"""The config groups of a config tree as `--help` shows them: each group's options (the
default first), what each option is (its file's first comment sentence) and the keys the
group's options set, with the default option's values. Read from the YAML files themselves."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.config.conftree import CONF_DIR, PRIMARY


@dataclass(frozen=True)
class Option:
    name: str
    about: str          # the first sentence of the file's leading comment, or ""


@dataclass(frozen=True)
class Group:
    name: str
    default: str
    options: tuple[Option, ...]      # the default first, then by name
    keys: tuple[tuple[str, Any], ...]  # (dotted key under the group, the default's value)


def groups(conf: Path = CONF_DIR) -> list[Group]:
    """The groups the primary config's defaults list names, in its order."""
    primary = yaml.safe_load((conf / f"{PRIMARY}.yaml").read_text())
    out = []
    for entry in primary.get("defaults", []):
        if not isinstance(entry, dict):
            continue
        (name, default), = entry.items()
        files = {p.stem: p for p in sorted((conf / name).glob("*.yaml"))}
        order = [default, *(o for o in files if o != default)]
        out.append(Group(name, default, tuple(Option(o, _about(files[o])) for o in order),
                         _keys([files[o] for o in order])))
    return out


def _about(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    first = re.split(r"(?<=\.)\s", " ".join(lines), maxsplit=1)[0]
    return first.rstrip(".")


def _keys(files: list[Path]) -> tuple[tuple[str, Any], ...]:
    """Every key the options set (a nested mapping one level deep as `a.b`), the default's
    value where it sets one, else the first option's."""
    seen: dict[str, Any] = {}
    for path in files:
        data = yaml.safe_load(path.read_text()) or {}
        for key, value in data.items():
            if key in ("name", "defaults") or any(k == key or k.startswith(f"{key}.")
                                                  for k in seen):
                continue
            if isinstance(value, dict) and len(value) > 6:
                seen[f"{key}.*"] = "{" + ", ".join(value) + "}"
            elif isinstance(value, dict) and value:
                seen.update((f"{key}.{sub}", inner) for sub, inner in value.items())
            else:
                seen[key] = value
    return tuple(seen.items())
