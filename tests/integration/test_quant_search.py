"""The repair search (quant.search=auto) on tiny_bert, CPU: it raises the worst module until the
gate holds and prints the plain config that pins its result (whose quantize key the plan
agrees with), or fails with one line naming what it tried."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.integration.test_mixed_precision import TINY, build, step


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("search")
    # tiny_bert at w8a8 is at 0.99968: a gate above it makes the search work
    record, err = build(tmp, "quant.search=auto", "verify.threshold=0.9999")
    assert record.get("status") == "ok", err
    return {"tmp": tmp, "record": record, "err": err}


def test_the_search_raises_modules_until_the_gate_holds(searched: dict[str, Any]) -> None:
    found = step(searched["record"], "quantize")["metrics"]["search"]
    path = found["path"]
    assert path[0]["raised"] is None and path[0]["cosine_mean"] < 0.9999
    assert path[-1]["cosine_mean"] >= 0.9999 and len(path) == found["candidates"] > 1
    assert all(p["raised"].startswith("/BertModel/") and p["own_sqnr_db"] > 0
               for p in path[1:])
    assert {r["modules"][0] for r in found["overrides"]} == {p["raised"] for p in path[1:]}
    verify = step(searched["record"], "verify")["metrics"]
    assert verify["passed"] and verify["cosine_mean"] == pytest.approx(path[-1]["cosine_mean"])
    summary = run_cli("report", str(searched["tmp"] / "out" / "tiny_bert-w8a8-cpu" / "run.json"))
    assert f"pin: {found['pin']}" in summary.stdout, summary.stderr


def test_the_pinned_config_is_the_last_candidate(searched: dict[str, Any]) -> None:
    found = step(searched["record"], "quantize")["metrics"]["search"]
    pin = found["pin"]
    assert re.fullmatch(r"quant\.overrides=\[\{modules: \[/BertModel/.*\]", pin)
    store = searched["tmp"] / "store"
    result = run_cli("plan", *TINY, "target=cpu", pin, "--format", "json", "--store", str(store))
    assert result.returncode == 0, result.stderr
    planned = next(s for s in json.loads(result.stdout)["steps"] if s["id"] == "quantize")
    assert planned["key"] == found["path"][-1]["key"]


@pytest.mark.slow
def test_a_gate_nothing_reaches_fails_naming_what_was_tried(tmp_path: Path) -> None:
    # the config's own rules win over the search's: pinned at 8 bits, nothing it raises helps
    record, err = build(tmp_path, "quant.search=auto", "verify.threshold=0.9999",
                        "quant.overrides=[{modules: [BertModel], activation_type: uint8, "
                        "weight_type: uint8}]")
    assert record.get("status") != "ok"
    line = next(x for x in err.splitlines() if "the search left nothing to raise" in x)
    assert "below verify.threshold 0.9999" in line and "-> float" in line
    assert "/BertModel/BertEncoder/BertLayer.1/" in line and "Traceback" not in err
