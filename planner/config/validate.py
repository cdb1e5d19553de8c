"""Validate a resolved config against schemas/config.schema.json, one clear line per violation."""

from __future__ import annotations

import math
from functools import cache, partial
from typing import Any

import schemas
from planner.config.conftree import PACKAGED, ConfigTree
from planner.config.unread import unread_lines
from planner.errors import ConfigError
from planner.support import memo
from planner.support.suggest import did_you_mean
from schemas.validator import Violation, validate, validate_at

MISSING = "???"  # Hydra's mandatory-value marker


def check_config(config: dict[str, Any], tree: ConfigTree = PACKAGED) -> None:
    """Raise ConfigError listing every violation; return None when the config is valid.
    A key the chosen option ignores is a violation too (tree: where the options that read it
    are looked for). In a memo session each top-level section is checked once per content
    (the schema ties no section to another), which gives the same lines."""
    lines = _lines_by_section(config, tree) if memo.active() else _lines(config, tree)
    if lines:
        raise ConfigError(*lines)


def _lines(config: dict[str, Any], tree: ConfigTree) -> list[str]:
    lines = [f"{p}: required but not set; set {p}=<value>" for p in sorted(missing_paths(config))]
    if not lines:
        lines = one_per_path(validate(config, schemas.load("config")))
    if not lines:
        lines = unread_lines(config, tree)
    return lines


def _lines_by_section(config: dict[str, Any], tree: ConfigTree) -> list[str]:
    """_lines(config), from each section's findings, memoised by the section's content."""
    found = [memo.remembered("config-section", (tree, key, memo.frozen(value)),
                             partial(_section, key, value, tree))
             for key, value in config.items()]
    missing = sorted(p for m, _, _ in found for p in m)
    if missing:
        return [f"{p}: required but not set; set {p}=<value>" for p in missing]
    violations = memo.remembered("config-keys", tuple(config),
                                 lambda: validate(dict.fromkeys(config), _shell()))
    violations = violations + [v for _, vs, _ in found for v in vs]
    if violations:
        return one_per_path(violations)
    return [line for _, _, unread in found for line in unread]


def _section(key: str, value: Any, tree: ConfigTree) -> tuple[list[str], list[Violation],
                                                                list[str]]:
    """A top-level section's missing paths, schema violations and set-but-unread keys."""
    root = schemas.load("config")
    schema = root["properties"].get(key)
    violations = validate_at(value, schema, root, (key,)) if schema is not None else []
    unread = unread_lines({key: value}, tree) if isinstance(value, dict) else []
    return missing_paths(value, f"{key}."), violations, unread


@cache
def _shell() -> dict[str, Any]:
    """The config schema with every section's own schema left out: what it asks of the set of
    sections (each is checked alone)."""
    root = schemas.load("config")
    return {**root, "properties": {k: {} for k in root["properties"]}}


def one_per_path(violations: list[Violation]) -> list[str]:
    """One line per config path (the one that carries a fix, if any), sorted by path."""
    best: dict[tuple, Violation] = {}
    for v in violations:
        if v.path not in best or ("x-fix" in v.schema and "x-fix" not in best[v.path].schema):
            best[v.path] = v
    return sorted({describe(v) for v in best.values()})


def missing_paths(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths whose value is Hydra's mandatory marker `???`."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in missing_paths(v, f"{prefix}{k}.")]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in missing_paths(v, f"{prefix}{i}.")]
    return [prefix[:-1]] if node == MISSING else []


@cache
def known_paths() -> frozenset[str]:
    """Every dotted key path the config schema declares (e.g. `quant.calibration.method`)."""
    root = schemas.load("config")
    found: set[str] = set()

    def walk(schema: dict[str, Any], prefix: str) -> None:
        if "$ref" in schema:
            return
        for branch in schema.get("oneOf", []) + schema.get("anyOf", []):
            walk(branch, prefix)
        for key, sub in schema.get("properties", {}).items():
            found.add(prefix + key)
            walk(sub, prefix + key + ".")

    walk(root, "")
    return frozenset(found)


def open_paths() -> frozenset[str]:
    """The dotted paths of mappings whose keys the schema leaves open (e.g.
    `model.random_init.config`): a key inside them is added with `+`, not set."""
    root = schemas.load("config")
    found: set[str] = set()

    def walk(schema: dict[str, Any], prefix: str) -> None:
        for branch in schema.get("oneOf", []) + schema.get("anyOf", []):
            walk(branch, prefix)
        for key, sub in schema.get("properties", {}).items():
            if sub.get("type") == "object" and "properties" not in sub and \
                    sub.get("additionalProperties", True) is not False:
                found.add(prefix + key)
            walk(sub, prefix + key + ".")

    walk(root, "")
    return frozenset(found)


def dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in path) or "<config>"


def show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def describe(v: Violation) -> str:
    """One line: dotted path, the bad value, what is allowed, and a fix when the schema gives one."""
    where = dotted(v.path)
    if v.keyword == "oneOf" and v.detail:
        return min((describe(sub) for sub in v.detail), key=len)
    text = _MESSAGES.get(v.keyword, _generic)(v)
    fix = v.schema.get("x-fix")
    return f"{where}: {text}" + (f"; {fix}" if fix else "")


def _generic(v: Violation) -> str:
    return f"{show(v.instance)} is not valid ({v.keyword})"


def _enum(v: Violation) -> str:
    allowed = ", ".join(str(e) for e in v.detail if e is not None)
    return f"{show(v.instance)} is not one of {allowed}{did_you_mean(str(v.instance), [str(e) for e in v.detail])}"


def _type(v: Violation) -> str:
    if isinstance(v.instance, float) and not math.isfinite(v.instance):
        return f"{show(v.instance)} is not a finite number"
    names = {"integer": "an integer", "number": "a number", "string": "a string",
             "boolean": "true or false", "object": "a mapping", "array": "a list", "null": "null"}
    return f"{show(v.instance)} is not {' or '.join(names[t] for t in v.detail)}"


def _unknown(v: Violation) -> str:
    parent = dotted(v.path[:-1])
    hint = did_you_mean(str(v.path[-1]), v.detail)
    hint = hint.replace("'", f"'{parent}.", 1) if hint and v.path[:-1] else hint
    return f"unknown key{hint}; allowed here: {', '.join(v.detail)}"


_MESSAGES = {
    "enum": _enum,
    "type": _type,
    "additionalProperties": _unknown,
    "const": lambda v: f"{show(v.instance)} must be {show(v.detail)}",
    "required": lambda v: "required key is missing",
    "minimum": lambda v: f"{show(v.instance)} is below the minimum {v.detail}",
    "maximum": lambda v: f"{show(v.instance)} is above the maximum {v.detail}",
    "minLength": lambda v: "must not be empty",
    "pattern": lambda v: f"{show(v.instance)} does not match {v.detail}",
    "minItems": lambda v: f"needs at least {v.detail} item(s)",
    "uniqueItems": lambda v: f"{show(v.detail)} is listed twice",
}
