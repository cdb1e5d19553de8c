"""quant=w4a16 on tiny_bert: on the CPU the quantized graph's MatMul and Gemm weights are int4
(per output channel, or in blocks with quant.block_size) and the embedding tables and norms are
not, and verify prints its cosine; on the QNN HTP simulator the same precision compiles and
verifies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest

from tests.integration.conftest import run_json, step

TINY = ("model=tiny_bert", "export.shapes.sequence_length=32", "quant=w4a16", "perf=none")


def build(tmp: Path, *overrides: str) -> dict[str, Any]:
    code, record, err = run_json(*TINY, *overrides, store=tmp / "store", outputs=tmp / "out")
    assert code == 0 and record is not None, err
    return record


def weight_dqs(record: dict[str, Any]) -> dict[str, list[tuple[onnx.NodeProto, str | None]]]:
    """The DequantizeLinear nodes of initializers in the quantizer's output, by the data type
    of what they dequantize."""
    model = onnx.load(step(record, "quantize")["outputs"]["model.onnx"], load_external_data=False)
    inits = {i.name: i.data_type for i in model.graph.initializer}
    readers = {x: n.op_type for n in model.graph.node for x in n.input}
    found: dict[str, list[tuple[onnx.NodeProto, str | None]]] = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:
            kind = onnx.TensorProto.DataType.Name(inits[n.input[0]])
            found.setdefault(kind, []).append((n, readers.get(n.output[0])))
    return found


def test_cpu_build_has_int4_weights_and_verifies(tmp_path: Path) -> None:
    record = build(tmp_path, "target=cpu")
    dqs = weight_dqs(record)
    # free axes on the CPU: every projection stays a MatMul (no Gemm of a 2-D reshape)
    assert {op_type for _n, op_type in dqs["INT4"]} == {"MatMul"}
    assert all(a.name == "axis" for n, _o in dqs["INT4"] for a in n.attribute)  # per channel
    assert not any(op_type in ("MatMul", "Gemm") for kind in ("UINT8", "UINT16")
                   for _n, op_type in dqs.get(kind, []))
    assert {op_type for _n, op_type in dqs["UINT16"]} >= {"Gather"}  # embeddings: not 4-bit
    metrics = step(record, "quantize")["metrics"]
    assert metrics["weights_4bit"] == len(dqs["INT4"]) == 12
    verify = step(record, "verify")["metrics"]
    print(f"tiny_bert w4a16 cpu: cosine_mean {verify['cosine_mean']:.6f}")
    assert verify["passed"] and verify["cosine_mean"] > 0.999


def test_cpu_build_in_blocks(tmp_path: Path) -> None:
    record = build(tmp_path, "target=cpu", "quant.block_size=32")
    blocks = [{a.name: a.i for a in n.attribute} for n, _o in weight_dqs(record)["INT4"]]
    assert len(blocks) == 12 and all(b["block_size"] == 32 for b in blocks)
    assert step(record, "quantize")["metrics"]["weights_blocked"] == 12
    verify = step(record, "verify")["metrics"]
    print(f"tiny_bert w4a16 block 32 cpu: cosine_mean {verify['cosine_mean']:.6f}")
    assert verify["passed"]


@pytest.mark.slow
@pytest.mark.parametrize("blocks", [(), ("quant.block_size=32",)])
def test_qnn_htp_build_compiles_and_verifies(tmp_path: Path, blocks: tuple[str, ...]) -> None:
    record = build(tmp_path, "target=qnn_htp", "verify.samples=2", *blocks)
    assert step(record, "compile")["action"] == "run"
    assert {op_type for _n, op_type in weight_dqs(record)["INT4"]} == {"MatMul", "Gemm"}
    verify = step(record, "verify")["metrics"]
    print(f"tiny_bert w4a16 {blocks} qnn_htp: cosine_mean {verify['cosine_mean']:.6f}")
    assert verify["passed"] and verify["cosine_mean"] > 0.999
