"""The static key/value cache, host side (executors/generation/cache.py): a transformers
cache's entries written into the buffers a graph reads."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from executors.generation.cache import static_entries


def test_each_layer_buffer_keeps_its_own_heads_and_width() -> None:
    """Layers of different geometry (Gemma 4's wider full-attention layers): each buffer has
    the layer's heads and width and the graph's slots, its first `seen` slots filled."""
    narrow, wide = torch.randn(1, 2, 3, 8), torch.randn(1, 1, 3, 16)
    layers = [SimpleNamespace(keys=narrow, values=-narrow), SimpleNamespace(keys=wide,
                                                                            values=-wide)]
    from transformers.cache_utils import DummyLayer

    layers.append(DummyLayer())  # a last layer that reuses an earlier one's entries: none
    feed = static_entries(layers, 3, [1, 2, 10, 8])
    assert {n: b.shape for n, b in feed.items()} == {
        "past_key_values.0.key": (1, 2, 10, 8), "past_key_values.0.value": (1, 2, 10, 8),
        "past_key_values.1.key": (1, 1, 10, 16), "past_key_values.1.value": (1, 1, 10, 16)}
    np.testing.assert_array_equal(feed["past_key_values.1.value"][:, :, :3], -wide.numpy())
    assert not feed["past_key_values.1.key"][:, :, 3:].any()


def test_pytorch_reference_cache_fills_the_buffers_of_a_bert_like_decoder() -> None:
    """A BERT-like decoder (RemBERT) left to make its own cache makes an encoder-decoder one;
    PyTorch's reference gives it the dynamic cache its graphs are traced with, whose layers
    fill the static buffers, and its steps still match the whole sequence's forward."""
    import transformers

    from executors.generation.decoder_only import TorchLM
    from planner.models.tiny import tiny_fields

    config = transformers.RemBertConfig(**tiny_fields(transformers.RemBertConfig),
                                        input_embedding_size=32, output_embedding_size=32,
                                        is_decoder=True)
    torch.manual_seed(0)
    model = transformers.RemBertForCausalLM(config).eval()
    lm = TorchLM(model)
    with torch.no_grad():
        lm.prompt([5, 6, 7])
        last = lm.step(8)
        whole = model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits[0, -1].numpy()
    feed = static_entries(lm.cache.layers, 4, [1, 2, 10, 32])
    assert feed["past_key_values.1.value"].shape == (1, 2, 10, 32)
    assert feed["past_key_values.1.value"][:, :, :4].any()
    np.testing.assert_allclose(last, whole, atol=1e-5)


def test_the_traced_step_gives_the_entries_of_layers_with_a_cache_of_their_own() -> None:
    """Gemma 4 with its last 2 of 4 layers reading an earlier layer's keys and values: the
    traced forward gives the logits and the 2 other layers' keys and values, a tensor each."""
    import transformers

    from executors.generation.modules import lm_step
    from planner.models.tiny import tiny_fields

    cls = transformers.Gemma4TextConfig
    config = cls(**{**tiny_fields(cls), "num_hidden_layers": 4, "num_kv_shared_layers": 2,
                    "layer_types": ["sliding_attention", "full_attention"] * 2,
                    "vocab_size_per_layer_input": 1000, "hidden_size_per_layer_input": 16})
    torch.manual_seed(0)
    model = transformers.Gemma4ForCausalLM(config).eval()
    with torch.no_grad():
        out = lm_step(model, torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long),
                      torch.arange(3)[None])
    assert len(out) == 1 + 2 * 2 and all(isinstance(t, torch.Tensor) for t in out)
    assert [t.shape[2] for t in out[1:]] == [3] * 4


def test_a_forward_that_rereads_the_whole_sequence_is_refused_in_one_line() -> None:
    """CPM-Ant's forward prepends its prompt embeddings and slices off the cached prefix itself:
    one token over its cache fails in PyTorch, said as the model's, not as a shape error."""
    import transformers

    from executors.generation.decoder_only import NoContinuation, TorchLM

    config = transformers.CpmAntConfig(
        vocab_size=64, hidden_size=32, dim_ff=32, num_attention_heads=2, dim_head=16,
        num_hidden_layers=1, prompt_length=4, prompt_types=4, segment_types=4,
        position_bias_num_buckets=32, position_bias_max_distance=64)
    torch.manual_seed(0)
    lm = TorchLM(transformers.CpmAntForCausalLM(config).eval())
    with torch.no_grad(), pytest.raises(NoContinuation) as info:
        lm.prompt([5, 6, 7])
        lm.step(8)
    assert len(str(info.value).splitlines()) == 1
    assert str(info.value).startswith("CpmAntForCausalLM's forward fails on one token over the "
                                      "cache its prompt filled (The size of tensor a")
