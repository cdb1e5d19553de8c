"""A model the TorchScript exporter cannot export builds with the default `export=torchscript`:
Inkling 2's short convolutions call `Unfold` on a tensor whose size TorchScript does not know
(it raises), so each graph is exported by dynamo (`export.fallback`), the decode graph with its
past axes free; the build generates PyTorch's tokens. (Saved in fp32: a bf16 checkpoint's
narrow trace fails first, then its fp32 copy, then the fallback: tests/unit/
test_export_fallback.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoints import text_checkpoint
from tests.integration.conftest import run_json, step

INKLING2 = {"layer_types": ["hybrid_sliding", "hybrid"], "swa_num_attention_heads": 2,
            "swa_num_key_value_heads": 2, "swa_head_dim": 32, "head_dim": 32,
            "num_key_value_heads": 2, "n_routed_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "pad_token_id": 0, "bos_token_id": 101,
            "eos_token_id": 102, "unpadded_vocab_size": 30522}  # MiniLM's vocabulary


@pytest.mark.slow
def test_what_torchscript_cannot_export_is_exported_by_dynamo(tmp_path: Path) -> None:
    ckpt = text_checkpoint(tmp_path / "ckpt", cls="Inkling2ForCausalLM",
                           model_type="inkling2_text", **INKLING2)
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", "target=cpu",
                                 "quant=none", "perf=none", "verify.samples=1",
                                 "export.shapes.prefill_length=8",
                                 "export.shapes.context_length=32",
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    for graph in ("prefill", "decode"):
        metrics = step(record, f"{graph}.export")["metrics"]
        assert metrics["exporter_used"] == "dynamo", metrics
        assert "Unfold" in metrics["exporter_why"] and metrics["opset_used"] == 18
    gen = step(record, "verify_generation")["metrics"]
    assert gen["token_agreement"] == 1.0 and gen["cosine_min"] > 0.999, gen
