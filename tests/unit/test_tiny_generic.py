"""`model=tiny_random` for a model type the tiny table does not list: its config is made tiny
from the size fields its transformers config class takes (under their own or their mapped
names, sub-configs too), so any type transformers ships plans and builds small."""

from __future__ import annotations

import pytest

from planner.models import sources
from planner.models.tiny import TINY, generic, tiny_fields
from planner.planning import plan_from_overrides


@pytest.mark.parametrize("model_type", ["phi", "gpt_neox", "opt", "gemma2"])
def test_an_unlisted_causal_lm_plans_as_a_tiny_one(model_type: str) -> None:
    assert model_type not in TINY
    spec = sources.random_init({"random_init": {"model_type": model_type, "seed": 0,
                                                "config": {"vocab_size": 500}}})
    config = spec["config"]
    assert config["vocab_size"] == 500  # the user's field over the tiny one
    layers = config.get("num_hidden_layers", config.get("num_layers"))
    assert layers == 2 and config.get("hidden_size", config.get("word_embed_proj_dim")) == 64
    ir = plan_from_overrides(["model=tiny_random", f"model.random_init.model_type={model_type}",
                              "target=cpu", "export.shapes.prefill_length=8",
                              "export.shapes.context_length=32"]).to_json()
    assert {"prefill.export", "decode.export", "bundle"} <= {s["id"] for s in ir["steps"]}


def test_fields_are_set_under_the_name_the_class_takes() -> None:
    """gpt2 takes n_embd / n_layer / n_head (attribute_map names hidden_size etc. to them)."""
    from transformers import GPT2Config

    got = tiny_fields(GPT2Config, {"vocab_size": 321})
    assert (got["n_embd"], got["n_layer"], got["n_head"], got["vocab_size"]) == (64, 2, 2, 321)
    assert "hidden_size" not in got and "num_hidden_layers" not in got


def test_sub_configs_are_made_tiny_and_an_unknown_type_gets_nothing() -> None:
    blip = generic("blip")
    assert blip["text_config"]["num_hidden_layers"] == 2
    assert blip["vision_config"]["hidden_size"] == 64
    assert generic("no_such_model_type") == {}


def test_per_layer_embeddings_are_tiny_and_index_the_same_tokens() -> None:
    """Gemma 4's per-layer token embeddings: a table as wide as hidden_size_per_layer_input
    for every layer (256 by default: 134M parameters at its 262144 ids), indexed by the same
    ids as the vocabulary (a smaller table would be read out of range)."""
    from transformers import Gemma4TextConfig

    fields = tiny_fields(Gemma4TextConfig, {"vocab_size": 500})
    assert fields["vocab_size_per_layer_input"] == fields["vocab_size"] == 500
    assert fields["hidden_size_per_layer_input"] == 16
