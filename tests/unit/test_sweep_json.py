"""`plan -m --format json` writes the sweep a job at a time (planner/render/sweep.py
json_pieces), each with planner/render/jsontext.py: the same bytes as one json.dumps(indent=2)
of the whole, to stdout and to -o."""

from __future__ import annotations

import enum
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.render import jsontext
from planner.render.sweep import json_pieces
from tests.conftest import run_cli_here


class Fact(str, enum.Enum):
    TAGGED = "tagged"


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text() | \
    st.sampled_from([Fact.TAGGED, float("nan"), float("inf"), -0.0, 1e16, 2**70])
KEYS = st.text() | st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none()
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.tuples(inner, inner) | st.dictionaries(KEYS, inner, max_size=4),
                      max_leaves=30)


@given(VALUES)
def test_jsontext_writes_what_json_dumps_writes(value: object) -> None:
    assert jsontext.dumps(value) == json.dumps(value, indent=2)


def test_jsontext_refuses_what_json_dumps_refuses() -> None:
    for bad in ({1, 2}, {(1, 2): 3}, object()):
        with pytest.raises(TypeError):
            json.dumps(bad, indent=2)
        with pytest.raises(TypeError):
            jsontext.dumps(bad)


@pytest.mark.parametrize("data", [
    {},
    {"jobs": [], "steps": [{}], "summary": {}},
    {"format_version": 1, "jobs": [{"plan": {"steps": [{"id": "é\nx", "params": {"a": [1, 2.5,
     None, True, {"b": []}]}}]}, "error": None}, {"plan": None, "error": "bad\tvalue"}],
     "steps": [{"key": "k", "jobs": [0, 1]}], "rewrites": [], "summary": {"jobs": 2}},
])
def test_the_pieces_are_json_dumps_of_the_whole(data: dict) -> None:
    assert "".join(json_pieces(data)) == json.dumps(data, indent=2) + "\n"


def test_a_sweep_plan_as_json_is_the_dump_of_its_data(tmp_path: Path) -> None:
    from planner.planning import plan_sweep

    overrides = ["model=tiny_bert", "quant=w8a8,none", "target=cpu"]
    store = str(tmp_path / "store")
    want = json.dumps(plan_sweep(overrides, store=store).to_json(), indent=2) + "\n"
    printed = run_cli_here("plan", "-m", "--format", "json", "--store", store, *overrides)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == want
    written = run_cli_here("plan", "-m", "-o", str(tmp_path / "plan.json"), "--store", store,
                           *overrides)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "plan.json").read_text() == want
