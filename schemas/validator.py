"""A small, strict JSON Schema (draft 2020-12) validator for the keywords modelplan's schemas use.

`modelplan plan` must start fast; importing jsonschema costs more than the whole plan.
This validator implements exactly the keywords below and refuses a schema that uses any
other (so a schema edit can never be silently ignored). tests/unit/test_validator.py
checks that it agrees with jsonschema on generated documents.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

ANNOTATIONS = {"$schema", "$id", "title", "description", "$comment", "default", "examples", "$defs"}
EXTENSIONS = {"x-fix", "x-unread"}  # x-unread: the keys a kind of option ignores, unset values
ASSERTIONS = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "uniqueItems", "minimum", "maximum", "minLength", "pattern",
    "oneOf", "anyOf", "allOf", "if", "then", "else", "$ref", "propertyNames",
}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
    or (isinstance(v, float) and v.is_integer()),
    # JSON has no NaN or infinity: a plan could not carry one
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    and math.isfinite(v),
}


@dataclass(frozen=True)
class Violation:
    """One failed assertion: where (path of keys), which keyword, and the failing subschema."""

    path: tuple[str | int, ...]
    keyword: str
    instance: Any
    schema: dict[str, Any]
    detail: Any = None


class SchemaKeywordError(ValueError):
    """The schema uses a keyword this validator does not implement."""


def validate(instance: Any, schema: dict[str, Any]) -> list[Violation]:
    """Return every violation of `schema` by `instance` (empty when valid)."""
    out: list[Violation] = []
    _check(instance, schema, schema, (), out)
    return out


def validate_at(instance: Any, schema: dict[str, Any], root: dict[str, Any],
                path: tuple[str | int, ...]) -> list[Violation]:
    """The violations of `schema`, a part of `root`, by the instance found at `path`."""
    out: list[Violation] = []
    _check(instance, schema, root, path, out)
    return out


def is_valid(instance: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    out: list[Violation] = []
    _check(instance, schema, root, (), out)
    return not out


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _resolve_ref(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise SchemaKeywordError(f"only local $ref is supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: booleans are not numbers.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _check(v: Any, s: dict[str, Any], root: dict[str, Any], path: tuple, out: list) -> None:
    unknown = set(s) - ASSERTIONS - ANNOTATIONS - EXTENSIONS
    if unknown:
        raise SchemaKeywordError(f"unsupported schema keyword(s) {sorted(unknown)} at {path}")
    if "$ref" in s:
        _check(v, _resolve_ref(s["$ref"], root), root, path, out)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(TYPES[t](v) for t in types):
            out.append(Violation(path, "type", v, s, types))
            return
    if "enum" in s and not any(_equal(v, e) for e in s["enum"]):
        out.append(Violation(path, "enum", v, s, s["enum"]))
    if "const" in s and not _equal(v, s["const"]):
        out.append(Violation(path, "const", v, s, s["const"]))
    _check_number(v, s, path, out)
    _check_string(v, s, path, out)
    if isinstance(v, dict):
        _check_object(v, s, root, path, out)
    if isinstance(v, list):
        _check_array(v, s, root, path, out)
    _check_combinators(v, s, root, path, out)


def _check_number(v: Any, s: dict[str, Any], path: tuple, out: list) -> None:
    if not TYPES["number"](v):
        return
    if "minimum" in s and v < s["minimum"]:
        out.append(Violation(path, "minimum", v, s, s["minimum"]))
    if "maximum" in s and v > s["maximum"]:
        out.append(Violation(path, "maximum", v, s, s["maximum"]))


def _check_string(v: Any, s: dict[str, Any], path: tuple, out: list) -> None:
    if not isinstance(v, str):
        return
    if "minLength" in s and len(v) < s["minLength"]:
        out.append(Violation(path, "minLength", v, s, s["minLength"]))
    if "pattern" in s and not _regex(s["pattern"]).search(v):
        out.append(Violation(path, "pattern", v, s, s["pattern"]))


def _check_object(v: dict, s: dict[str, Any], root: dict[str, Any], path: tuple, out: list) -> None:
    props = s.get("properties", {})
    for key in s.get("required", []):
        if key not in v:
            out.append(Violation(path + (key,), "required", None, s, key))
    for key, value in v.items():
        if key in props:
            _check(value, props[key], root, path + (key,), out)
        elif "additionalProperties" in s:
            extra = s["additionalProperties"]
            if extra is False:
                out.append(Violation(path + (key,), "additionalProperties", value, s, sorted(props)))
            elif isinstance(extra, dict):
                _check(value, extra, root, path + (key,), out)
        if "propertyNames" in s:
            _check(key, s["propertyNames"], root, path + (key,), out)


def _check_array(v: list, s: dict[str, Any], root: dict[str, Any], path: tuple, out: list) -> None:
    if "minItems" in s and len(v) < s["minItems"]:
        out.append(Violation(path, "minItems", v, s, s["minItems"]))
    if "maxItems" in s and len(v) > s["maxItems"]:
        out.append(Violation(path, "maxItems", v, s, s["maxItems"]))
    if s.get("uniqueItems"):
        seen: list[Any] = []
        for item in v:
            if any(_equal(item, x) for x in seen):
                out.append(Violation(path, "uniqueItems", v, s, item))
                break
            seen.append(item)
    if "items" in s:
        for i, item in enumerate(v):
            _check(item, s["items"], root, path + (i,), out)


def _check_combinators(v: Any, s: dict[str, Any], root: dict[str, Any], path: tuple, out: list) -> None:
    for sub in s.get("allOf", []):
        _check(v, sub, root, path, out)
    if "anyOf" in s and not any(is_valid(v, sub, root) for sub in s["anyOf"]):
        out.append(Violation(path, "anyOf", v, s, _branch_errors(v, s["anyOf"], root, path)))
    if "oneOf" in s:
        passing = [sub for sub in s["oneOf"] if is_valid(v, sub, root)]
        if len(passing) != 1:
            out.append(Violation(path, "oneOf", v, s, _branch_errors(v, s["oneOf"], root, path)))
    if "if" in s:
        branch = s.get("then") if is_valid(v, s["if"], root) else s.get("else")
        if branch is not None:
            _check(v, branch, root, path, out)


def _branch_errors(v: Any, branches: list, root: dict[str, Any], path: tuple) -> list[Violation]:
    """Violations of the branch that matches the instance's type best (for a useful message)."""
    best: list[Violation] | None = None
    for sub in branches:
        errs: list[Violation] = []
        _check(v, sub, root, path, errs)
        type_mismatch = any(e.keyword == "type" and e.path == path for e in errs)
        if errs and not type_mismatch and (best is None or len(errs) < len(best)):
            best = errs
    return best or []
