"""Where a causal LM's graphs get a token's position: a forward that takes no position ids but
passes its keyword arguments on to a language model that does (MOSS-Transcribe-Diarize's audio
class, which AutoModelForCausalLM loads) is given them, so the decode graph over the static
cache is at the token's position, not at the cache's length."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def tiny(model_type: str, cls: str) -> object:
    from planner.models.tiny import tiny_fields

    config_cls = transformers.CONFIG_MAPPING[model_type]
    config = config_cls(**tiny_fields(config_cls))
    for name in getattr(config_cls, "sub_configs", {}):
        sub = getattr(config, name, None)
        if isinstance(sub, transformers.PretrainedConfig):
            setattr(config, name, type(sub)(**tiny_fields(type(sub))))
    torch.manual_seed(0)
    return getattr(transformers, cls)(config).eval()


def test_positions_passed_on_to_the_language_model_place_the_decoded_token() -> None:
    from executors.generation.modules import lm_step, takes_positions

    model = tiny("moss_transcribe_diarize", "MossTranscribeDiarizeForConditionalGeneration")
    assert takes_positions(model)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    slots = 12  # the static cache: 4 entries seen, 8 empty slots masked
    with torch.no_grad():
        whole = model(input_ids=ids).logits[0, -1]
        prompt = lm_step(model, ids[:, :4], torch.ones(1, 4, dtype=torch.long),
                         torch.arange(4)[None])
        names = [f"past_key_values.{i}.{p}" for i in range(len(prompt[1:]) // 2)
                 for p in ("key", "value")]
        past = {n: torch.nn.functional.pad(t, (0, 0, 0, slots - 4))
                for n, t in zip(names, prompt[1:], strict=True)}
        mask = torch.zeros(1, slots + 1, dtype=torch.long)
        mask[0, :4] = mask[0, -1] = 1
        step = lm_step(model, ids[:, 4:], mask, torch.tensor([[4]]), past)[0][0, -1]
    assert torch.allclose(step, whole, atol=1e-5), float((step - whole).abs().max())


def test_a_forward_whose_decoder_reads_no_positions_takes_none() -> None:
    from executors.generation.modules import takes_positions

    assert not takes_positions(tiny("bloom", "BloomForCausalLM"))  # ALiBi, from the mask
