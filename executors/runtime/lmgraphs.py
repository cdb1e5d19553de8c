"""The torch modules a causal LM's two graphs trace (planner/models/lm.py has their I/O).

Both run the checkpoint's own forward with a transformers cache built inside the traced
function: the prefill graph from an empty cache (its present = the prompt's keys and values),
the decode graph from the static cache buffers it is fed, whose empty slots the attention mask
hides; it returns only the decoded token's keys and values, which the host writes into slot
`position`. Every shape is fixed, no op scatters, and the weights are the same tensors in both
graphs (one weight set, stored once by content)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def layer_count(model: Any) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") \
        else model.config
    return int(config.num_hidden_layers)


def _cache(model: Any, past: tuple[Any, ...]) -> Any:
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    for i in range(len(past) // 2):
        cache.update(past[2 * i], past[2 * i + 1], i)
    return cache


def _presents(cache: Any, layers: int, last: int | None) -> list[Any]:
    out = []
    for i in range(layers):
        layer = cache.layers[i]
        keys, values = layer.keys, layer.values
        if last is not None:
            keys, values = keys[:, :, -last:], values[:, :, -last:]
        out += [keys, values]
    return out


def step(model: Any, tokens: Any, attention_mask: Any, position_ids: Any,
         past: tuple[Any, ...] = (), embedded: bool = False,
         headless: bool = False) -> tuple[Any, ...]:
    """(logits, present.0.key, present.0.value, ...) of one forward: the prompt on an empty
    cache, or one token on the fed cache (the new entries only). `embedded`: `tokens` are
    the embeddings the host looked up; `headless`: the final hidden states instead of the
    logits (the host applies the head)."""
    layers = layer_count(model)
    cache = _cache(model, past)
    kwargs = {"inputs_embeds" if embedded else "input_ids": tokens,
              "attention_mask": attention_mask, "position_ids": position_ids,
              "past_key_values": cache, "use_cache": True, "return_dict": True}
    out = model.base_model(**kwargs) if headless else model(**kwargs)
    new = tokens.shape[1] if past else None
    first = out.last_hidden_state if headless else out.logits
    return (first, *_presents(out.past_key_values, layers, new))


def positional(model: Any, input_names: list[str],
               run: Callable[[Any, dict[str, Any]], Any]) -> Any:
    """A module to trace: positional inputs named `input_names`, `run(model, feed)` returning
    the output tensors; it holds the model as `model`, the scope of the node names
    (WRAPPER_PREFIX)."""
    import torch

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return run(self.model, dict(zip(input_names, args, strict=True)))

    return Graph().eval()


def graph_module(model: Any, graph: str, input_names: list[str],
                 output_names: list[str]) -> Any:
    """The module to trace for the prefill or decode graph, taking positional inputs."""
    headless = output_names[0] == "hidden_states"

    def run(held: Any, feed: dict[str, Any]) -> Any:
        past = tuple(feed[n] for n in input_names if n.startswith("past_key_values."))
        embedded = "inputs_embeds" in feed
        return step(held, feed["inputs_embeds" if embedded else "input_ids"],
                    feed["attention_mask"], feed["position_ids"], past, embedded, headless)

    return positional(model, input_names, run)
