"""A causal LM whose layers keep a recurrent state (executors/generation/modules.py): its
graphs would drop that state between steps, so the module a graph traces is refused, naming
the layers; a model whose layers all cache keys and values is traced. Read from transformers'
own cache classes for the config, so no weights are made."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from executors.generation.modules import lm_module
from executors.generation.recurrent import RecurrentState
from planner.models.tiny import tiny_fields

NAMES = ["input_ids", "attention_mask", "position_ids"]


def model_of(model_type: str, **fields: Any) -> Any:
    from transformers import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[model_type]
    return SimpleNamespace(config=config_cls(**{**tiny_fields(config_cls), **fields}))


@pytest.mark.parametrize(("model_type", "fields", "layers"), [
    ("mamba", {}, "layers 0, 1"),                                           # state-space only
    ("lfm2", {"layer_types": ["conv", "full_attention"]}, "layer 0 "),      # a convolution
    ("falcon_h1", {}, "layers 0, 1"),                                       # beside attention
    # linear attention beside attention, as config.json's layer_types say
    ("qwen3_next", {"layer_types": ["linear_attention", "full_attention"]}, "layer 0 "),
    ("lara_mini", {"num_hidden_layers": 3, "layer_types": [
        "linear_attention", "sliding_attention", "full_attention"]}, "layer 0 "),
    ("jamba", {}, "layers 0, 1"),  # its layer kinds from its attention period, not a list
])
def test_a_recurrent_state_is_refused_naming_its_layers(model_type: str, fields: dict[str, Any],
                                                        layers: str) -> None:
    with pytest.raises(RecurrentState, match=f"keeps a recurrent state in {layers}"):
        lm_module(model_of(model_type, **fields), NAMES, ["logits"])


def test_attention_layers_only_are_traced() -> None:
    model = model_of("lfm2", layer_types=["full_attention", "full_attention"])
    assert lm_module(model, NAMES, ["logits"]).model is model
