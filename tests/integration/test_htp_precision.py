"""What keeps a language model's QDQ graphs accurate on QNN HTP (w8a16_pc) from tiny random
checkpoints saved as downloaded ones are: legalize fuses the RMSNorms of the hidden states into
one node each and writes a Sub of a constant as an Add (Apertus's expm1, which HTP computed as
zeros in the decode graph), and the packaged configuration's calibration headroom keeps a decode
graph's inputs past its one-token-a-sample calibration from being clipped (OLMoE's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoints import text_checkpoint
from tests.integration.conftest import run_json, step

IDS = {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}
BUILD = ("model=local_hf", "export.shapes.prefill_length=8", "export.shapes.context_length=32",
         "perf=none", "target=qnn_htp", "quant=w8a16_pc", "quant.calibration.samples=4",
         "verify.samples=2", "verify.new_tokens=4")


@pytest.mark.slow
def test_apertus_builds_for_htp_with_its_norms_fused_and_its_expm1_as_an_add(
        tmp_path: Path) -> None:
    ckpt = text_checkpoint(tmp_path / "ckpt", cls="ApertusForCausalLM", model_type="apertus",
                           dtype="float16", num_key_value_heads=1, **IDS)
    code, record, err = run_json(*BUILD, f"model.path={ckpt}", store=tmp_path / "store",
                                 outputs=tmp_path / "out")
    assert code == 0, err
    for graph in ("prefill", "decode"):
        rewrites = step(record, f"{graph}.legalize")["metrics"]["rewrites"]
        # two norms of the hidden states a layer, and the last one (its per-head query and
        # key norms stay composed); one xIELU a layer, whose expm1 is Exp(x) - 1
        assert rewrites["rms_norms"] == 5 and rewrites["constant_subs"] >= 2, rewrites
        assert step(record, f"{graph}.verify")["metrics"]["cosine_mean"] >= 0.99
    assert step(record, "verify_generation")["metrics"]["cosine_mean"] >= 0.99


@pytest.mark.slow
def test_the_headroom_keeps_an_moe_decode_graph_accurate(tmp_path: Path) -> None:
    ckpt = text_checkpoint(tmp_path / "ckpt", cls="OlmoeForCausalLM", model_type="olmoe",
                           dtype="bfloat16", num_experts=4, num_experts_per_tok=2,
                           num_key_value_heads=1, **IDS)
    args = (*BUILD, f"model.path={ckpt}")
    code, record, err = run_json(*args, store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    kept = step(record, "decode.verify")["metrics"]["cosine_mean"]
    assert kept >= 0.99
    # the ranges as calibrated (the export and legalize come from the same store)
    code, bare, err = run_json(*args, "quant.calibration.headroom=1", "verify.threshold=0",
                               store=tmp_path / "store", outputs=tmp_path / "out1")
    assert code == 0, err
    assert step(bare, "decode.export")["action"] == "cached"
    assert step(bare, "decode.verify")["metrics"]["cosine_mean"] < kept
