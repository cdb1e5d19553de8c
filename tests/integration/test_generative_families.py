"""Generative families no catalogue entry names, each built from its own config.json and
forward (benchmarks/families_bench.py builds all of the installed transformers'): tiny
random-weight checkpoints saved in bf16 or fp16 as downloaded ones are, built for the CPU in
fp32 through `model=local_hf`, whose greedy generation matches PyTorch token for token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest

from tests.checkpoints import text_checkpoint
from tests.integration.conftest import run_json, step

SHAPES = ("export.shapes.prefill_length=8", "export.shapes.context_length=32")
IDS = {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}
MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}

# (model type, class, dtype saved in, config fields beyond tests/checkpoints.py's TINY)
CASES: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("mixtral", "MixtralForCausalLM", "bfloat16", {**MOE, "num_key_value_heads": 1}),
    ("apertus", "ApertusForCausalLM", "float16", {"num_key_value_heads": 1}),  # xIELU: expm1
)


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def built(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    model_type, cls, dtype, fields = request.param
    tmp = tmp_path_factory.mktemp(model_type)
    ckpt = text_checkpoint(tmp / "ckpt", cls=cls, model_type=model_type, dtype=dtype,
                           **IDS, **fields)
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", *SHAPES, "perf=none",
                                 "target=cpu", "quant=none", store=tmp / "store",
                                 outputs=tmp / "out")
    assert code == 0, err
    return model_type, record


def test_generation_matches_pytorch_token_for_token(built: tuple[str, dict[str, Any]]) -> None:
    _model_type, record = built
    gen = step(record, "verify_generation")["metrics"]
    assert gen["token_agreement"] == 1.0 and gen["exact_prompts"] == gen["prompts"], gen
    assert gen["cosine_min"] > 0.9999, gen


def test_every_expert_is_in_both_graphs(built: tuple[str, dict[str, Any]]) -> None:
    """A mixture-of-experts block holds all its experts in each graph (the decode graph's one
    token picks 2 of 4; the graph must serve any 2), and no graph counts tokens per expert."""
    model_type, record = built
    if model_type != "mixtral":
        pytest.skip("no mixture of experts")
    for graph in ("prefill", "decode"):
        path = Path(step(record, f"{graph}.export")["outputs"]["model.onnx"])
        model = onnx.load(str(path), load_external_data=False)
        experts = [i for i in model.graph.initializer if "experts" in i.name]
        assert experts and all(i.dims[0] == MOE["num_local_experts"] for i in experts), graph
        assert not {"NonZero", "Loop", "If"} & {n.op_type for n in model.graph.node}, graph
