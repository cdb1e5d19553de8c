"""A mixture-of-experts block written as its own loop over the experts a batch hits (DBRX's,
LongCat-Flash's) gives what it gave once made dense (runtime/dense_experts.py), on routings
the example input did not have; a traced dense block serves any routing; a block that
dispatches through transformers' experts interface (Mixtral's) is left to it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

from executors.runtime import dense_experts

TINY = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}


def dbrx() -> Any:
    config = transformers.AutoConfig.for_model(
        "dbrx", vocab_size=64, d_model=32, n_layers=1, n_heads=2,
        attn_config={"kv_n_heads": 1, "rope_theta": 10000.0},
        ffn_config={"moe_num_experts": 4, "moe_top_k": 2, "ffn_hidden_size": 16})
    return transformers.DbrxForCausalLM(config).eval()


def longcat() -> Any:
    # identity ("zero") experts besides the routed ones: its indices range over both
    config = transformers.AutoConfig.for_model(
        "longcat_flash", vocab_size=64, hidden_size=32, num_attention_heads=2, num_layers=1,
        n_routed_experts=4, zero_expert_num=2, moe_topk=2, expert_ffn_hidden_size=16,
        ffn_hidden_size=16, kv_lora_rank=8, q_lora_rank=8, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=8)
    return transformers.LongcatFlashForCausalLM(config).eval()


def experts_of(model: Any) -> Any:
    return next(m for m in model.modules() if type(m).__name__.endswith("Experts"))


def routing(tokens: int, count: int, k: int, seed: int) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    index = torch.stack([torch.randperm(count, generator=g)[:k] for _ in range(tokens)])
    weights = torch.rand(tokens, k, generator=g)
    return index, weights / weights.sum(-1, keepdim=True)


@pytest.mark.parametrize("make", [dbrx, longcat], ids=["dbrx", "longcat_flash"])
def test_a_dense_block_gives_what_its_own_loop_does(make: Any) -> None:
    torch.manual_seed(0)
    model = make()
    block = experts_of(model)
    count = dense_experts._own_loop_experts(block)
    assert count == (6 if make is longcat else 4)
    x = torch.randn(5, 32)
    with torch.no_grad():
        want = [block(x, *routing(5, count, 2, seed)) for seed in range(3)]
        assert dense_experts.densify(model) == 1
        forward = block.forward.__func__
        assert dense_experts.densify(model, fixed=True) == 1  # made dense once, then set
        assert block.forward.__func__ is forward and getattr(block, dense_experts.FIXED)
        dense_experts.densify(model)
        got = [block(x, *routing(5, count, 2, seed)) for seed in range(3)]
    # one pick a token where the block's own loop takes one (LongCat-Flash's needs two)
    assert getattr(block, dense_experts.PICKS) == (2 if make is longcat else 1)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fixed", [False, True], ids=["free-axes", "fixed-shapes"])
def test_a_traced_dense_block_serves_routings_the_example_did_not_have(fixed: bool) -> None:
    """Fixed: the routing of each expert's pass is a constant of the traced shape (its index
    arithmetic folds for HTP); free: it follows the input's shape, at any token count."""
    torch.manual_seed(0)
    block = experts_of(dbrx())
    x = torch.randn(3, 32)
    example = (x, torch.zeros(3, 2, dtype=torch.long), torch.full((3, 2), 0.5))
    others = [(x, *routing(3, 4, 2, seed=1))]
    if not fixed:
        others.append((torch.randn(5, 32), *routing(5, 4, 2, seed=2)))
    with torch.no_grad():
        want = [block(*other) for other in others]
        dense_experts.densify(block, fixed=fixed)
        traced = torch.jit.trace(block, example, check_trace=False)
        for other, expected in zip(others, want, strict=True):
            torch.testing.assert_close(traced(*other), expected, rtol=1e-5, atol=1e-6)


def test_an_experts_block_of_transformers_interface_is_left_to_it() -> None:
    config = transformers.AutoConfig.for_model("mixtral", **TINY, intermediate_size=16,
                                               num_local_experts=4, num_experts_per_tok=2,
                                               num_key_value_heads=1)
    model = transformers.MixtralForCausalLM(config).eval()
    assert dense_experts.densify(model) == 0
