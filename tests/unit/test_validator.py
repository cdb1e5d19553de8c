"""The fast schema validator agrees with jsonschema on valid and broken configs."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from planner.config.compose import compose
from schemas.validator import SchemaKeywordError, validate

BASE = compose(["model=tiny_bert"])
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=False),
                 st.text(max_size=8), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, prefix + (k,))
    return out


def set_path(doc: dict, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    doc[path[-1]] = value


@pytest.mark.parametrize("name", ["config", "plan", "run"])
def test_schemas_are_valid_draft_2020_12(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(schemas.load(name))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_agrees_with_jsonschema_on_mutated_configs(data: st.DataObject) -> None:
    doc = copy.deepcopy(BASE)
    for _ in range(data.draw(st.integers(0, 3))):
        path = data.draw(st.sampled_from(paths(doc)))
        set_path(doc, path, data.draw(JUNK))
    group = data.draw(st.sampled_from(["model", "quant", "export"]))
    if data.draw(st.booleans()) and isinstance(doc[group], dict):
        doc[group]["extra_key"] = 1
    ours = not validate(doc, schemas.load("config"))
    theirs = jsonschema.Draft202012Validator(schemas.load("config")).is_valid(doc)
    assert ours == theirs


def test_refuses_keywords_it_does_not_implement() -> None:
    with pytest.raises(SchemaKeywordError):
        validate(1, {"multipleOf": 2})
