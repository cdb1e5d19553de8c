"""The static key/value cache, host side (executors/generation/cache.py): a transformers
cache's entries written into the buffers a graph reads."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from executors.generation.cache import static_entries


def test_each_layer_buffer_keeps_its_own_heads_and_width() -> None:
    """Layers of different geometry (Gemma 4's wider full-attention layers): each buffer has
    the layer's heads and width and the graph's slots, its first `seen` slots filled."""
    narrow, wide = torch.randn(1, 2, 3, 8), torch.randn(1, 1, 3, 16)
    layers = [SimpleNamespace(keys=narrow, values=-narrow), SimpleNamespace(keys=wide,
                                                                            values=-wide)]
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
