"""JSON Schemas for editing config files: one per config group (for conf/<group>/*.yaml) and
one for primary and experiment files, derived from schemas/config.schema.json.

yaml-language-server reads JSON Schema draft 7, so `$defs` become `definitions`. A config
file is a fragment: it may extend another through a Hydra defaults list, so nothing is
required, `defaults` is allowed, and a value may be a `${...}` interpolation or Hydra's `???`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import schemas
from planner.config.compose import GROUPS
from planner.support.atomic import write_atomic

DRAFT7 = "http://json-schema.org/draft-07/schema#"
INTERPOLATION = {"type": "string", "pattern": "^(\\$\\{.+\\}|\\?\\?\\?)$",
                 "description": "an OmegaConf interpolation, or ??? (must be set when used)"}
DEFAULTS = {"type": "array", "description": "Hydra defaults list: options this file extends "
            "(e.g. [tiny_bert, _self_]) or, in a primary config, the groups it picks",
            "items": {"anyOf": [{"type": "string"}, {"type": "object"}]}}
LEAF_KEYS = {"type", "enum", "const"}


def fragment(schema: Any) -> Any:
    """A schema for a part of a config as a file may write it (see the module docstring)."""
    if isinstance(schema, list):
        return [fragment(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("required", "x-unread"):
            continue
        if key == "$ref":
            out[key] = value.replace("#/$defs/", "#/definitions/")
        elif key == "x-fix":
            out["description"] = f"Fix: {value}"
        elif key in ("properties", "$defs"):
            out["definitions" if key == "$defs" else key] = {k: fragment(v)
                                                             for k, v in value.items()}
        else:
            out[key] = fragment(value)
    is_leaf = LEAF_KEYS & schema.keys() and "object" not in _types(schema) \
        and "array" not in _types(schema)
    return {"anyOf": [out, INTERPOLATION]} if is_leaf else out


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type", [])
    return t if isinstance(t, list) else [t]


def group_schema(group: str) -> dict[str, Any]:
    root = schemas.load("config")
    body = fragment(copy.deepcopy(root["properties"][group]))
    body.setdefault("properties", {})["defaults"] = DEFAULTS
    return {"$schema": DRAFT7, "title": f"modelplan config group '{group}' (conf/{group}/*.yaml)",
            **body, "definitions": fragment(copy.deepcopy(root.get("$defs", {})))}


def root_schema() -> dict[str, Any]:
    """Primary configs (--config-name) and `# @package _global_` experiment files."""
    root = schemas.load("config")
    props = {k: fragment(copy.deepcopy(v)) for k, v in root["properties"].items()}
    props["defaults"] = DEFAULTS
    props["hydra"] = {"type": "object", "description": "Hydra's own settings"}
    return {"$schema": DRAFT7, "title": "modelplan primary or experiment config",
            "type": "object", "additionalProperties": False, "properties": props,
            "definitions": fragment(copy.deepcopy(root.get("$defs", {})))}


def write(directory: Path) -> list[Path]:
    """Write <group>.schema.json for every group and config.schema.json; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    docs = {f"{g}.schema.json": group_schema(g) for g in GROUPS}
    docs["config.schema.json"] = root_schema()
    written = []
    for name, doc in docs.items():
        path = directory / name
        write_atomic(path, json.dumps(doc, indent=2) + "\n")
        written.append(path)
    return written
