"""`plan -m --format json` writes the sweep a job at a time (planner/render/sweep.py
json_pieces): the same bytes as one json.dumps(indent=2) of the whole, to stdout and to -o."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.render.sweep import json_pieces
from tests.conftest import run_cli_here


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
