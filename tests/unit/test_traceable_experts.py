"""The experts' implementation the export traces (executors/runtime/torchmodel.py): a class
whose own module does not choose it, around a language model whose module does (Kimi K2.5's
image-text class around DeepSeek-V3's mixture of experts), gets the traceable one on that
model; so does a class loaded without the load's keyword (through an Auto class)."""

from __future__ import annotations

from typing import Any

from executors.runtime import torchmodel

TEXT = {"model_type": "deepseek_v3", "vocab_size": 100, "hidden_size": 64,
        "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
        "first_k_dense_replace": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
        "kv_lora_rank": 16, "q_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16,
        "v_head_dim": 32, "head_dim": 16, "max_position_embeddings": 64}
VISION = {"model_type": "kimi_k25_vision", "hidden_size": 32, "intermediate_size": 64,
          "num_attention_heads": 2, "num_hidden_layers": 1, "pos_emb_height": 8,
          "pos_emb_width": 8}


def experts_of(model: Any) -> dict[str, str | None]:
    """Each PreTrainedModel in `model` with its config's experts implementation."""
    import transformers

    return {type(m).__name__: m.config._experts_implementation for m in model.modules()
            if isinstance(m, transformers.PreTrainedModel)}


def test_a_language_model_inside_an_image_text_class_traces_its_experts_batched() -> None:
    import transformers

    config = transformers.AutoConfig.for_model("kimi_k25", text_config=TEXT,
                                               vision_config=VISION, projection_hidden_size=32)
    model = transformers.Kimi_K25ForConditionalGeneration(config)
    assert not torchmodel.chooses_experts(type(model))
    text = next(m for m in model.modules() if type(m).__name__ == "DeepseekV3Model")
    assert torchmodel.chooses_experts(type(text))
    assert text.config._experts_implementation != torchmodel.TRACEABLE_EXPERTS  # as loaded
    torchmodel.traceable_experts(model)
    assert experts_of(model)["DeepseekV3Model"] == torchmodel.TRACEABLE_EXPERTS


def test_a_class_loaded_without_the_keyword_gets_it_and_one_with_it_keeps_it() -> None:
    """As an Auto class loads it (no keyword: transformers' grouped kernel), and as the load
    with the keyword leaves it."""
    import transformers

    config = transformers.AutoConfig.for_model(**TEXT)
    model = transformers.DeepseekV3ForCausalLM._from_config(config)
    assert set(experts_of(model).values()) != {torchmodel.TRACEABLE_EXPERTS}
    torchmodel.traceable_experts(model)
    assert set(experts_of(model).values()) == {torchmodel.TRACEABLE_EXPERTS}
    chosen = transformers.DeepseekV3ForCausalLM._from_config(
        config, experts_implementation=torchmodel.TRACEABLE_EXPERTS)
    torchmodel.traceable_experts(chosen)
    assert set(experts_of(chosen).values()) == {torchmodel.TRACEABLE_EXPERTS}
