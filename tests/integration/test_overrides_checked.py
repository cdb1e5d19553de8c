"""quant.overrides selectors are checked before anything is built: a module no module of the
model is (on a trace of the model, or the export already in the store), an op type neither
ONNX nor ONNX Runtime has; one line naming the rule and what there is, exit 2, an empty store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli, run_cli_here

BUILD = ("model=tiny_bert", "target=cpu", "quant=w8a8", "verify=none", "perf=none")


@pytest.mark.parametrize(("rule", "said"), [
    ("{modules: [NoSuchModule], activation_type: uint16}",
     "quant.overrides.0.modules=NoSuchModule matches no module of BertModel"),
    ("{op_types: [MatMull], activation_type: uint16}",
     ("quant.overrides.0.op_types=MatMull: no ONNX or ONNX Runtime op is named MatMull "
     "(did you mean 'MatMul'?)")),
    ("{except_op_types: [Softmaxx], precision: float}",
     "quant.overrides.0.except_op_types=Softmaxx"),
])
def test_a_selector_that_selects_nothing_is_refused_before_the_build(tmp_path: Path, rule: str,
                                                                      said: str) -> None:
    result = run_cli("run", *BUILD, f"quant.overrides=[{rule}]", "--store",
                     str(tmp_path / "store"), "--outputs", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "store").rglob("manifest.json"))


def test_a_module_is_checked_on_the_export_in_the_store_at_plan_time(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ok = run_cli_here("run", *BUILD, "quant.overrides=[{modules: [BertSelfAttention], "
                      "activation_type: uint16}]", "--store", str(store), "--outputs",
                      str(tmp_path / "out"))
    assert ok.returncode == 0, ok.stderr
    planned = run_cli("plan", *BUILD, "quant.overrides=[{modules: [BertSelfAttentio], "
                      "activation_type: uint16}]", "--store", str(store))
    assert planned.returncode == 2
    assert "quant.overrides.0.modules=BertSelfAttentio matches no module" in planned.stderr
    assert "did you mean 'BertSelfAttention'" in planned.stderr
