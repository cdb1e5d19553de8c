"""`inspect --hierarchy` traces a random model of the checkpoint's config as the export does:
in fp32 though the checkpoint was saved in bf16 (its config says so, and the random model was
made in bf16 against fp32 example inputs), with the experts implementation the export loads
(transformers' default grouped kernel is not exported)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.checkpoints import text_checkpoint
from tests.conftest import run_cli

MIXTRAL = {"num_local_experts": 4, "num_experts_per_tok": 2, "num_key_value_heads": 2,
           "pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}


def test_inspect_hierarchy_of_a_bf16_mixture_of_experts(tmp_path: Path) -> None:
    ckpt = text_checkpoint(tmp_path / "ckpt", cls="MixtralForCausalLM", model_type="mixtral",
                           dtype="bfloat16", **MIXTRAL)
    result = run_cli("inspect", "model=local_hf", f"model.path={ckpt}", "target=cpu",
                     "export.shapes.prefill_length=8", "export.shapes.context_length=32",
                     "--hierarchy", "--json")
    assert result.returncode == 0, result.stderr
    hierarchy = json.loads(result.stdout)["hierarchy"]
    assert set(hierarchy) == {"prefill", "decode"}
    for tags in hierarchy.values():
        assert any("MixtralExperts" in tag or "SparseMoeBlock" in tag for tag in tags), tags
