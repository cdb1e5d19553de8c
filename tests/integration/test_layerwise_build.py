"""A language model quantized layer by layer (`quant.layerwise=always`, executors/onnx/
layerwise.py) from its bf16 checkpoint: both graphs' quantize steps give the QDQ graphs the
whole-graph path gives (the same nodes, the same weight blobs and scales), and the build
generates as w8a16_pc does."""

from __future__ import annotations

from pathlib import Path

import onnx

from tests.checkpoints import text_checkpoint
from tests.integration.conftest import run_json, step

SHAPES = ("export.shapes.prefill_length=8", "export.shapes.context_length=32", "perf=none")


def _graph(path: str) -> tuple[list[bytes], dict[str, bytes]]:
    model = onnx.load(path, load_external_data=False)
    return (sorted(n.SerializeToString(deterministic=True) for n in model.graph.node),
            {i.name: i.SerializeToString(deterministic=True) for i in model.graph.initializer})


def test_a_bf16_llama_quantized_layer_by_layer_is_the_whole_graphs_quantization(
        tmp_path: Path) -> None:
    ckpt = text_checkpoint(tmp_path / "llama", "LlamaForCausalLM", "llama", dtype="bfloat16")
    common = ("model=local_hf", f"model.path={ckpt}", "target=cpu", "quant=w8a16_pc", *SHAPES)
    records = {}
    for mode in ("never", "always"):
        code, record, err = run_json(*common, f"quant.layerwise={mode}",
                                     *(["verify=none"] if mode == "never" else []),
                                     store=tmp_path / "store", outputs=tmp_path / mode)
        assert code == 0, err
        records[mode] = record
    for graph in ("prefill", "decode"):
        whole, pieces = (step(records[m], f"{graph}.quantize") for m in ("never", "always"))
        assert whole["key"] != pieces["key"] and pieces["action"] == "run"
        assert pieces["metrics"]["layerwise"] == {"pieces": 2, "block": "/model/model/layers"}
        assert "layerwise" not in whole["metrics"]
        assert _graph(whole["outputs"]["model.onnx"]) == _graph(pieces["outputs"]["model.onnx"])
    # the same graphs generate the same: w8a16_pc's own agreement with PyTorch (31 of 32
    # greedy tokens on this random model)
    generated = step(records["always"], "verify_generation")["metrics"]
    assert generated["token_agreement"] >= 0.9 and generated["cosine_mean"] > 0.99
