"""winml-cli's exclusions through `modelplan import`: nodes_to_exclude, op_types_to_quantize and
fp16_op_block_list become quant.overrides rules that keep those nodes float, and the ledger
says what each became. Planner-side only: nothing is built."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.recipe_models import SKIP_WHY, corpus_dir
from tests.unit.test_import import RECIPE, config, no_datasets, write


def imported(tmp_path: Path, quant: dict[str, Any], name: str) -> tuple[dict[str, Any], str]:
    recipe = copy.deepcopy(RECIPE)
    recipe["quant"] = {**quant, "model_id": "acme/tiny-bert", "task": "text-classification"}
    recipe.pop("eval")
    path = write(tmp_path, f"acme_tiny-bert/text-classification_{name}_config.json", recipe)
    result = run_cli("import", str(path), "-o", str(tmp_path / "conf"),
                     env=no_datasets(tmp_path))
    assert result.returncode == 0, result.stderr
    cfg = config(tmp_path / "conf", f"acme_tiny-bert-text-classification-{name}")
    return cfg, result.stdout


def fields(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["field"]: f for f in cfg["origin"]["fields"]}


def test_excluded_nodes_and_op_types_become_float_rules(tmp_path: Path) -> None:
    cfg, _out = imported(tmp_path, {
        "mode": "qdq", "weight_type": "uint8", "activation_type": "uint8",
        "op_types_to_quantize": ["MatMul", "Gemm", "MatMul"],
        "nodes_to_exclude": ["/bert/pooler/dense/Gemm"]}, "w8a8")
    assert cfg["quant"]["name"] == "w8a8"
    assert cfg["quant"]["overrides"] == [
        {"except_op_types": ["Gemm", "MatMul"], "precision": "float"},
        {"nodes": ["/bert/pooler/dense/Gemm"], "precision": "float"}]
    said = fields(cfg)
    assert said["quant.op_types_to_quantize"]["outcome"] == "mapped"
    assert said["quant.op_types_to_quantize"]["config"] == "quant.overrides"
    assert said["quant.op_types_to_quantize"]["note"].startswith(
        "{except_op_types: [Gemm, MatMul], precision: float}: the op types it does not list")
    assert "{nodes: [/bert/pooler/dense/Gemm], precision: float}" in \
        said["quant.nodes_to_exclude"]["note"]


def test_the_fp16_block_list_keeps_those_ops_float32(tmp_path: Path) -> None:
    cfg, _out = imported(tmp_path, {"mode": "fp16", "fp16_op_block_list": ["Softmax"],
                                    "nodes_to_exclude": ["x"]}, "fp16")
    assert cfg["quant"]["kind"] == "fp16"
    assert cfg["quant"]["overrides"] == [{"op_types": ["Softmax"], "precision": "float"}]
    said = fields(cfg)
    assert said["quant.fp16_op_block_list"]["config"] == "quant.overrides"
    assert said["quant.nodes_to_exclude"]["outcome"] == "dropped"  # winml-cli ignores it too


def test_a_bad_exclusion_list_is_one_line(tmp_path: Path) -> None:
    recipe = copy.deepcopy(RECIPE)
    recipe["quant"]["nodes_to_exclude"] = "all"
    path = write(tmp_path, "acme_tiny-bert/text-classification_w8a16_config.json", recipe)
    result = run_cli("import", str(path), "-o", str(tmp_path / "conf"),
                     env=no_datasets(tmp_path))
    assert "quant.nodes_to_exclude: 'all' is not a list of names" in result.stdout + \
        result.stderr


def test_real_recipes_leave_them_unset_and_say_so(tmp_path: Path) -> None:
    corpus = corpus_dir()
    if corpus is None:
        pytest.skip(SKIP_WHY)
    src = corpus / "facebook_dinov2-small" / "image-feature-extraction_w8a16_config.json"
    result = run_cli("import", str(src), "-o", str(tmp_path / "conf"), "--json",
                     env=no_datasets(tmp_path))
    assert result.returncode == 0, result.stderr
    conf = tmp_path / "conf"
    name = next(p.stem for p in conf.glob("*.yaml"))
    cfg = config(conf, name)
    assert cfg["quant"]["overrides"] == []
    said = fields(cfg)
    for key in ("nodes_to_exclude", "op_types_to_quantize"):
        assert said[f"quant.{key}"]["outcome"] == "mapped"
        assert said[f"quant.{key}"]["note"] == "not set: every node is quantized"
