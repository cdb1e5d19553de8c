"""A decoder forward is given the encoder's states as the model's own encoder gives them, an
output object: Switch Transformers, ProphetNet, NLLB-MoE and Moonshine read
`encoder_outputs.last_hidden_state` (a tuple has none), Moonshine its `.attention_mask` too
(none: the host passes the encoder's mask itself)."""

from __future__ import annotations

import pytest

from executors.generation import modules
from planner.models.tiny import tiny_fields


@pytest.mark.parametrize(("model_type", "cls", "encoder_input"), [
    ("switch_transformers", "SwitchTransformersForConditionalGeneration", "input_ids"),
    ("moonshine", "MoonshineForConditionalGeneration", "input_values"),
])
def test_the_decoder_reads_given_states_as_its_own_encoder_output(
        model_type: str, cls: str, encoder_input: str) -> None:
    import torch
    import transformers

    config_cls = transformers.CONFIG_MAPPING[model_type]
    torch.manual_seed(0)
    model = getattr(transformers, cls)(config_cls(**tiny_fields(config_cls))).eval()
    feed = torch.randint(3, 100, (1, 7)) if encoder_input == "input_ids" else \
        torch.randn(1, 4000)
    ids = torch.tensor([[modules.start(model), 5, 9]])
    with torch.no_grad():
        own = model.get_encoder()(**{encoder_input: feed}, return_dict=True)
        want = model(encoder_outputs=own, decoder_input_ids=ids, return_dict=True,
                     use_cache=False).logits
        got = modules.decode(model, own.last_hidden_state, ids, use_cache=False).logits
    assert got.shape == (1, 3, model.config.vocab_size)
    assert torch.equal(got, want)
