"""Checkpoints as people download them: saved in bfloat16 (every recent LLM) or float16. The
export traces them as saved (no fp32 copy of the model: executors/runtime/narrow.py) and gives
fp32 graphs (ONNX Runtime's CPU EP has no bf16 Add or Where, and the quantizer reads fp32
graphs); the plan says so (export's `upcast`) and keys it, and the graphs compare with PyTorch
on the same upcast weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoints import text_checkpoint
from tests.integration.conftest import run_json, step

SHAPES = ("export.shapes.prefill_length=8", "export.shapes.context_length=32")
CASES = {  # name: (class, model type, dtype, the steps that compare with PyTorch)
    "llama_bf16": ("LlamaForCausalLM", "llama", "bfloat16", ("verify_generation",)),
    "bert_fp16": ("BertModel", "bert", "float16", ("verify",)),
    "bert_bf16": ("BertModel", "bert", "bfloat16", ("verify",)),
}


def build(tmp: Path, name: str, *args: str) -> dict[str, Any]:
    cls, model_type, dtype, _ = CASES[name]
    ckpt = text_checkpoint(tmp / name, cls, model_type, dtype=dtype)
    assert json.loads((ckpt / "config.json").read_text())["dtype"] == dtype
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", *SHAPES, "perf=none",
                                 *args, store=tmp / "store", outputs=tmp / "out")
    assert code == 0, err
    exports = [s for s in record["steps"] if s["op"] == "export"]
    assert exports and all(s["status"] == "ok" for s in exports)
    assert {s["metrics"].get("traced_dtype") for s in exports} == {dtype}  # not an fp32 copy
    return record


def agreement(record: dict[str, Any], name: str) -> list[float]:
    """Each compared step's cosine against PyTorch (or the fp32 graph, for verify)."""
    checks = CASES[name][3]
    return [s["metrics"]["cosine_mean"] for s in record["steps"]
            if s["op"] in checks and s["status"] == "ok"]


@pytest.mark.parametrize("name", list(CASES))
def test_a_half_precision_checkpoint_builds_for_the_cpu(tmp_path: Path, name: str) -> None:
    record = build(tmp_path, name, "target=cpu", "quant=none")
    cosines = agreement(record, name)
    assert cosines and min(cosines) > 0.9999
    if CASES[name][3] == ("verify_generation",):
        assert step(record, "verify_generation")["metrics"]["token_agreement"] == 1.0


def test_the_plan_says_the_export_upcasts(tmp_path: Path) -> None:
    from planner.planning import plan_from_overrides

    ckpt = text_checkpoint(tmp_path / "bert_bf16", "BertModel", "bert", dtype="bfloat16")
    half = plan_from_overrides(["model=local_hf", f"model.path={ckpt}", "target=cpu"])
    export = next(s for s in half.to_json()["steps"] if s["op"] == "export")
    assert export["params"]["upcast"] == "bfloat16"
    full = text_checkpoint(tmp_path / "bert_fp32", "BertModel", "bert")
    plain = plan_from_overrides(["model=local_hf", f"model.path={full}", "target=cpu"])
    assert "upcast" not in next(s for s in plain.to_json()["steps"]
                                if s["op"] == "export")["params"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama_bf16", "bert_fp16"])
def test_a_half_precision_checkpoint_builds_for_htp(tmp_path: Path, name: str) -> None:
    record = build(tmp_path, name, "target=qnn_htp", "quant=w8a16_pc")
    assert all(s["metrics"]["context_nodes"] >= 1 for s in record["steps"]
               if s["op"] == "compile")
    assert min(agreement(record, name)) > 0.99
