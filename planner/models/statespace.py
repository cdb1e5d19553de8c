"""Whether a causal LM's layers keep a recurrent state, as transformers' cache classes say for
its config: the layers of the cache transformers makes for it that are LinearAttention layers
(a state-space model's, a convolution's or a linear attention's states of fixed shape). A
model with no attention heads in config.json (Mamba's) is planned from them: the export then
reads the states' shapes from the cache the model itself fills
(executors/generation/recurrent.py)."""

from __future__ import annotations

from typing import Any


def recurrent_layers(info: dict[str, Any]) -> list[int]:
    """The layers of transformers' cache for config.json `info` that keep a recurrent state;
    none where transformers does not know its model type or cannot make its cache."""
    try:
        from transformers import CONFIG_MAPPING, DynamicCache
        from transformers.cache_utils import LinearAttentionCacheLayerMixin

        config = CONFIG_MAPPING[info.get("model_type")].from_dict(info)
        cache = DynamicCache(config=config)
    except (ImportError, KeyError, ValueError, TypeError, AttributeError):
        # an unknown type, or a config its class or its cache refuses: no state known
        return []
    return [i for i, layer in enumerate(cache.layers)
            if isinstance(layer, LinearAttentionCacheLayerMixin)]
