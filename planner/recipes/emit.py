"""A converted build as a primary config of a user config tree: the packaged config with the
recipe's options picked in its defaults list, the recipe's values under `_self_` (each with
the recipe field it came from as a comment), and `origin` listing every field and what became
of it (which `modelplan plan --format md` shows per step)."""

from __future__ import annotations

import json
import re
from typing import Any

from planner.errors import InternalError
from planner.recipes.convert import Build
from planner.recipes.ledger import DROPPED

MARKER = "# Imported by `modelplan import`"
GROUP_ORDER = ("model", "export", "optim", "quant", "target", "verify", "eval")
PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
YAML_WORDS = {"null", "true", "false", "yes", "no", "on", "off", "y", "n", "~"}


def origin(build: Build) -> dict[str, Any]:
    """The `origin` node of the config (schemas/config.schema.json)."""
    return {"format": "winml-recipe", "recipes": [f.shown for f in build.files],
            "fields": [e.to_json() for e in build.entries]}


def values(build: Build) -> dict[str, Any]:
    """What the config sets on top of the packaged options it picks."""
    assert build.draft is not None
    return {**build.draft.values, "origin": origin(build)}


def config_text(build: Build, tree_dir: str) -> str:
    """The primary config file for one imported build."""
    assert build.draft is not None
    draft = build.draft
    lines = _header(build, tree_dir) + ["defaults:", "  - config"]
    for group in GROUP_ORDER:
        if group in draft.choices:
            lines.append(_commented(f"  - override {group}: {draft.choices[group]}",
                                    draft.why_choice.get(group, "")))
    lines += ["  - _self_", ""]
    for key, value in values(build).items():
        lines += _node(key, value, "", draft.sources)
    return "\n".join(lines) + "\n"


def _header(build: Build, tree_dir: str) -> list[str]:
    how = f"--config-dir {tree_dir} --config-name {build.name}"
    dropped = [e for e in build.entries if e.outcome == DROPPED]
    lines = [f"{MARKER} from the winml-cli build recipe"
             + ("s" if len(build.files) > 1 else ""),
             *[f"#   {_safe(f.shown)}" for f in build.files],
             "# Plan and build it:",
             f"#   modelplan plan {how}",
             f"#   modelplan run  {how} model.path=/path/to/checkpoint",
             "# model.path is a local copy of the checkpoint; without it the model is read",
             "# from the local Hugging Face cache. origin.fields lists every recipe field and",
             "# what became of it; `modelplan plan --format md` shows them by step."]
    lines += [_safe(f"# Will not plan yet: {w}") for w in build.warnings]
    if dropped:
        lines.append(f"# Not applied ({len(dropped)} of {len(build.entries)} fields):")
        by_note: dict[str, list[str]] = {}
        for e in dropped:
            by_note.setdefault(e.note, []).append(e.field)
        lines += [_safe(f"#   {', '.join(fields)}: {note}") for note, fields in by_note.items()]
    return lines


def _commented(line: str, comment: str) -> str:
    return f"{line:<40}  # {_safe(comment)}" if comment else line


def _safe(text: str) -> str:
    """Text for a YAML comment: what YAML cannot hold there, escaped."""
    return "".join(c if _printable(c) else f"\\u{ord(c):04x}" for c in text)


def _node(key: str, value: Any, indent: str, sources: dict[str, list[str]],
          path: str = "") -> list[str]:
    path = f"{path}.{key}" if path else key
    comment = ", ".join(sources.get(path, []))
    if isinstance(value, dict) and value and path != "origin.fields":
        out = [_commented(f"{indent}{key}:", comment)]
        for k, v in value.items():
            out += _node(k, v, indent + "  ", sources, path)
        return out
    if isinstance(value, list) and value and isinstance(value[0], dict):
        out = [_commented(f"{indent}{key}:", comment)]
        return out + [f"{indent}  - {flow(item)}" for item in value]
    return [_commented(f"{indent}{key}: {flow(value)}", comment)]


def flow(value: Any) -> str:
    """A value as YAML flow text that reads back as the same value (and that OmegaConf does not
    take for an interpolation)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        if PLAIN.fullmatch(value) and value.lower() not in YAML_WORDS:
            return value
        return _quoted(value.replace("${", "\\${"))
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flow(str(k))}: {flow(v)}" for k, v in value.items()) + "}"
    raise InternalError(f"modelplan import: cannot write {type(value).__name__} values; "
                        "report this recipe")


def _printable(c: str) -> bool:
    """What YAML keeps as it is in a double-quoted scalar (no control or line-break chars)."""
    o = ord(c)
    return (0x20 <= o <= 0x7E or 0xA0 <= o <= 0xD7FF or 0xE000 <= o <= 0xFFFD or o >= 0x10000) \
        and o not in (0x2028, 0x2029)


def _quoted(value: str) -> str:
    """A YAML double-quoted scalar: JSON's escapes, and \\u/\\U for what YAML cannot hold."""
    body = json.dumps(value, ensure_ascii=False)[1:-1]
    return '"' + "".join(c if _printable(c) else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF
                         else f"\\U{ord(c):08x}" for c in body) + '"'

