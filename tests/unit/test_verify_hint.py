"""A failed comparison's fix depends on what was compared: a quantized graph's precision can be
raised; an fp32 graph computes what PyTorch does, so its difference is the export's and no other
`quant` mends it."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from executors.onnx.artifacts import MODEL, stamp_file
from executors.steps.verify import EXPORT_HINT, HINT, RAISE_HINT, hint


def stamped(folder: Path, facts: dict) -> Path:
    folder.mkdir()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), str(folder / MODEL))
    stamp_file(folder, facts, "step", "key")
    return folder / MODEL


def test_an_fp32_graph_is_not_told_to_change_its_precision(tmp_path: Path) -> None:
    fp32 = stamped(tmp_path / "fp32", {"normalized": {"value": True, "by": "k"}})
    quantized = stamped(tmp_path / "q", {"precision": {"value": "w8a16", "by": "k"}})
    fp16 = stamped(tmp_path / "h", {"precision": {"value": "fp16", "by": "k"}})
    assert hint(fp32) == EXPORT_HINT and "quant=" not in EXPORT_HINT
    assert hint(fp16) == HINT and "quant=w8a16_pc" in HINT
    eight = stamped(tmp_path / "q8", {"precision": {"value": "w8a8", "by": "k"}})
    assert hint(eight) == HINT
    # 16-bit activations already (w8a16_pc on HTP: gemma3's generation at cosine 0.9891): its
    # modules go up a rung; quant=w8a16_pc is no fix by itself
    assert hint(quantized) == RAISE_HINT == hint(stamped(tmp_path / "m", {"precision": {
        "value": "w8a16+mixed", "by": "k"}}))
    assert "quant.search=auto" in RAISE_HINT and not RAISE_HINT.startswith("use quant=")
    assert hint(tmp_path / "missing.onnx") == EXPORT_HINT  # unstamped: fp32, as every model is


def test_a_degenerate_reference_is_named_not_told_to_raise_precision(tmp_path: Path) -> None:
    """A random-weight MobileNetV2 on HTP: reference outputs peak at ~1e-26, cosine 0.0 at
    w8a16_pc. No quant mends that; the message says why and what does."""
    quantized = stamped(tmp_path / "q", {"precision": {"value": "w8a16", "by": "k"}})
    said = hint(quantized, reference_peak=1.3e-26)
    assert "quant=w8a16_pc" not in said and "degenerate" in said and "1.3e-26" in said
    assert "untrained" in said and "real weights" in said and "verify=none" in said
    assert hint(quantized, reference_peak=2.5) == RAISE_HINT  # a reference that says something
    fp32 = stamped(tmp_path / "fp32", {"normalized": {"value": True, "by": "k"}})
    assert hint(fp32, reference_peak=1e-26) == EXPORT_HINT  # fp32 computes what PyTorch does
