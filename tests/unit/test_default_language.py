"""A model reading its inputs' language from its config (X-MOD's language adapters) gets the
one its config lists (executors/runtime/torchmodel.default_language), or one line asks for it."""

from __future__ import annotations

import pytest
import torch
import transformers

from executors.runtime import torchmodel


def _xmod(languages: tuple[str, ...]) -> torch.nn.Module:
    config = transformers.XmodConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=40, is_decoder=True, languages=languages)
    return transformers.XmodForCausalLM(config).eval()


def test_the_one_language_a_config_lists_is_its_default() -> None:
    model = _xmod(("de_DE",))
    torchmodel.default_language(model)
    assert model.config.default_language == "de_DE"
    assert model(torch.tensor([[5, 6, 7]])).logits.shape == (1, 3, 64)


def test_several_languages_and_no_default_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as info:
        torchmodel.default_language(_xmod(("en_XX", "de_DE")))
    assert str(info.value) == (
        "config.json lists 2 languages (en_XX, de_DE) and no default_language, the language its "
        "inputs are read in; set default_language in the checkpoint's config.json to one of them")


def test_a_model_without_languages_is_left_as_it_is() -> None:
    model = transformers.BertModel(transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32))
    torchmodel.default_language(model)
    assert not hasattr(model.config, "default_language")
