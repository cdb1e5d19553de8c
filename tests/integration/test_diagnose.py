"""`modelplan diagnose` end to end: a quantized build's modules ranked by SQNR against the fp32
graph, on tiny_bert (fast) and on the packaged MiniLM at w8a8 (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

TINY = ("model=tiny_bert", "export.shapes.sequence_length=32", "quant=w8a8", "target=cpu")


def diagnose(store: Path, *args: str, timeout: float = 900) -> tuple[int, Any, str, str]:
    result = run_cli("diagnose", *args, "--store", str(store), "--quiet", timeout=timeout)
    data = json.loads(result.stdout) if result.stdout.startswith("{") else None
    return result.returncode, data, result.stdout, result.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    store = tmp_path_factory.mktemp("diagnose-store")
    code, data, _out, err = diagnose(store, *TINY, "--json")
    assert code == 0, err
    return {"store": store, "data": data}


def test_every_module_of_tiny_bert_has_sqnr_and_cosine(tiny: dict[str, Any]) -> None:
    data = tiny["data"]
    rows = {r["tag"]: r for r in data["modules"]}
    assert data["candidate_step"] == "tag" and data["samples"] == 4
    for tag in ("/BertModel", "/BertModel/BertEmbeddings", "/BertModel/BertEncoder",
                "/BertModel/BertEncoder/BertLayer.1/BertAttention/BertSelfAttention"):
        assert tag in rows
    for r in rows.values():
        assert r["outputs"] >= 1 and r["nodes"] >= 1 and 0 < r["cosine"] <= 1 + 1e-9
        assert math.isfinite(r["sqnr_db"]) and r["sqnr_db"] > 0
    layer = "/BertModel/BertEncoder/BertLayer.1"
    # a layer's output is its BertOutput's output: a parent aggregates its children
    assert rows[layer]["sqnr_db"] == pytest.approx(rows[f"{layer}/BertOutput"]["sqnr_db"])
    assert rows[layer]["nodes"] > sum(r["nodes"] for t, r in rows.items()
                                      if t.startswith(f"{layer}/BertAttention/"))
    whole = data["graph"]
    assert 0.99 < whole["cosine"] <= 1 and whole["sqnr_db"] > 10


def test_the_text_ranks_the_worst_module_first_and_draws_the_tree(tiny: dict[str, Any]) -> None:
    code, _data, out, err = diagnose(tiny["store"], *TINY, "--top", "3")
    assert code == 0, err
    worst = min(tiny["data"]["modules"], key=lambda r: r["sqnr_db"])
    lines = out.splitlines()
    ranked = lines[lines.index("Worst modules (SQNR of their outputs, dB):") + 2]
    assert ranked.split()[0] == worst["tag"]
    assert "Module tree:" in lines and "  (" in out and "more modules" in out
    assert lines[-1].startswith(f"Worst: {worst['tag']} at ")


def test_verify_none_is_read_as_the_build_diagnose_runs_anyway(tiny: dict[str, Any]) -> None:
    code, data, _out, err = diagnose(tiny["store"], *TINY, "verify=none", "--json")
    assert code == 0, err
    assert data["modules"] == tiny["data"]["modules"]


def test_an_unquantized_build_is_refused_with_a_fix(tmp_path: Path) -> None:
    code, _data, _out, err = diagnose(tmp_path, "model=tiny_bert", "quant=none", "target=cpu")
    assert code != 0 and "set quant=w8a8" in err and "Traceback" not in err


@pytest.mark.slow
def test_minilm_w8a8_names_the_modules_that_lose_accuracy(tmp_path: Path) -> None:
    code, data, _out, err = diagnose(tmp_path, "model=minilm", "quant=w8a8", "target=cpu",
                                     "--json", timeout=1800)
    assert code == 0, err
    rows = sorted(data["modules"], key=lambda r: r["sqnr_db"])
    assert data["graph"]["cosine"] < 0.99  # the known drop of the whole model
    assert len(rows) > 20 and rows[0]["sqnr_db"] < rows[-1]["sqnr_db"]
    assert all(0 < r["cosine"] <= 1 + 1e-9 for r in rows)
