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
