"""Mixed precision by module on tiny_bert (CPU): a w8a8 build with one module raised to 16-bit
activations carries uint16 Q/DQ on that module's tensors and uint8 elsewhere, and verify
improves; `precision: float` leaves the selected nodes' weights float; a rule that selects
nothing fails the run with one line."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import onnx
import pytest

from executors.onnx.artifacts import TAG_KEY
from tests.conftest import run_cli_here

TINY = ("model=tiny_bert", "export.shapes.sequence_length=32", "quant=w8a8", "perf=none")
ENCODER = "/BertModel/BertEncoder"


def build(tmp: Path, *overrides: str) -> tuple[dict[str, Any], str]:
    target = () if any(o.startswith("target=") for o in overrides) else ("target=cpu",)
    result = run_cli_here("run", *TINY, *target, *overrides, "--store", str(tmp / "store"),
                          "--outputs", str(tmp / "out"), "--json", "--quiet")
    record = json.loads(result.stdout) if result.stdout.startswith("{") else {}
    return record, result.stderr


def step(record: dict[str, Any], sid: str) -> dict[str, Any]:
    return next(s for s in record["steps"] if s["id"] == sid)


def q_types(record: dict[str, Any]) -> dict[bool, Counter[int]]:
    """Activation Q node types, by whether the node sits in the encoder."""
    model = onnx.load(step(record, "tag")["outputs"]["model.onnx"], load_external_data=False)
    inits = {i.name: i.data_type for i in model.graph.initializer}
    found: dict[bool, Counter[int]] = {True: Counter(), False: Counter()}
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits:
            tag = next(p.value for p in n.metadata_props if p.key == TAG_KEY)
            found[tag.startswith(ENCODER)][inits[n.input[2]]] += 1
    return found


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    record, err = build(tmp_path_factory.mktemp("plain"))
    assert record.get("status") == "ok", err
    return record


def test_a_module_raised_to_uint16_carries_uint16_and_verify_improves(
        plain: dict[str, Any], tmp_path: Path) -> None:
    record, err = build(tmp_path, "quant.overrides=[{modules: [BertEncoder], "
                                  "activation_type: uint16}]")
    assert record.get("status") == "ok", err
    u8, u16 = onnx.TensorProto.UINT8, onnx.TensorProto.UINT16
    before, after = q_types(plain), q_types(record)
    assert set(before[True]) == set(before[False]) == {u8}
    assert after[True] == {u16: before[True][u8]}  # every encoder tensor, none left uint8
    # the embeddings stay uint8 (on the CPU the encoder reads their output as it is)
    assert after[False] == before[False] == {u8: before[False][u8]}
    assert step(record, "quantize")["metrics"]["overridden"]["activation uint16"] > 0
    cos = [step(r, "verify")["metrics"]["cosine_mean"] for r in (plain, record)]
    assert cos[1] > cos[0]


def test_precision_float_leaves_the_selected_weights_float(tmp_path: Path) -> None:
    record, err = build(tmp_path, "quant.overrides=[{modules: [BertIntermediate, BertOutput], "
                                  "op_types: [Gemm, MatMul], precision: float}]")
    assert record.get("status") == "ok", err
    model = onnx.load(step(record, "tag")["outputs"]["model.onnx"], load_external_data=False)
    made_by_dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    inits = {i.name for i in model.graph.initializer}
    chosen = [n for n in model.graph.node if n.op_type in ("Gemm", "MatMul") and
              any(k in next(p.value for p in n.metadata_props if p.key == TAG_KEY)
                  for k in ("/BertIntermediate", "/BertOutput"))]
    assert len(chosen) == 4  # dense in and out of each of the two layers
    assert all(n.input[1] in inits and n.input[1] not in made_by_dq for n in chosen)
    assert step(record, "quantize")["metrics"]["overridden"]["float nodes"] == 4


def test_float_nodes_compile_and_verify_on_the_htp_simulator(tmp_path: Path) -> None:
    record, err = build(tmp_path, "target=qnn_htp", "quant.overrides=[{modules: "
                                  "[BertIntermediate], precision: float}]")
    assert record.get("status") == "ok", err
    assert step(record, "quantize")["metrics"]["overridden"]["float nodes"] == 6
    assert step(record, "compile")["metrics"]["context_nodes"] == 1  # one HTP graph, no CPU
    assert step(record, "verify")["metrics"]["passed"]


def test_fp16_keeps_the_blocked_ops_float32(tmp_path: Path) -> None:
    record, err = build(tmp_path, "quant=fp16", "quant.overrides=[{op_types: [Softmax], "
                                  "precision: float}]")
    assert record.get("status") == "ok", err
    model = onnx.load(step(record, "tag")["outputs"]["model.onnx"], load_external_data=False)
    made_by = {o: n for n in model.graph.node for o in n.output}
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    assert len(softmax) == 2 and all(made_by[n.input[0]].op_type == "Cast" for n in softmax)
    assert step(record, "quantize")["metrics"]["overridden"] == {"float32 nodes": 2}


def test_a_rule_that_selects_nothing_is_refused_before_the_build(tmp_path: Path) -> None:
    record, err = build(tmp_path, "quant.overrides=[{modules: [BertAttn], precision: float}]")
    assert record.get("status") != "ok"
    assert "quant.overrides.0.modules=BertAttn matches no module of BertModel" in err
    assert "did you mean 'BertAttention'" in err and "Traceback" not in err
    assert not list((tmp_path / "store").rglob("manifest.json"))  # nothing built
