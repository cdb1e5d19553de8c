"""A causal LM's key/value cache geometry as the model fills it (executors/generation/
geometry.py), against the plan's estimate from config.json (planner/models/generation.py), and
the graph I/O the export shapes from it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from executors.generation import geometry
from planner.models import generation as lm
from planner.models.tiny import tiny_fields


def tiny(cls_name: str, **extra: Any) -> Any:
    import transformers

    config_cls = getattr(transformers, cls_name.replace("ForCausalLM", "Config"))
    config = config_cls(**{**tiny_fields(config_cls), **extra})
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(config).eval()


def test_a_latent_attention_fills_the_cache_the_plan_derives() -> None:
    """DeepSeek-V3's latent attention caches a latent of kv_lora_rank and a rotary key of
    qk_rope_head_dim, one head each (not num_key_value_heads x head_dim): the planner's rule
    from config.json gives what the model writes."""
    model = tiny("DeepseekV3ForCausalLM", kv_lora_rank=24, qk_rope_head_dim=8,
                 qk_nope_head_dim=16, v_head_dim=16, head_dim=8)
    filled = geometry.model_cache(model)
    assert filled == [((1, 24), (1, 8))] * 2
    assert filled == lm.layer_shapes(model.config.to_dict())


def test_graph_io_takes_the_cache_the_model_fills() -> None:
    """MiMo-V2-Flash's sliding-window layers cache twice num_key_value_heads, which config.json
    does not say: the decode graph's buffers and both graphs' present outputs take each layer's
    heads and width from the model, the slots and the other inputs as planned."""
    model = tiny("MiMoV2FlashForCausalLM", num_attention_heads=4, num_key_value_heads=1,
                 v_head_dim=16, layer_types=["full_attention", "sliding_attention"],
                 mlp_layer_types=["dense", "dense"])
    filled = geometry.model_cache(model)
    assert filled == [((1, 32), (1, 16)), ((2, 32), (2, 16))]
    specs = lm.lm_graph_specs(model.config.to_dict(), {"prefill_length": 4,
                                                       "context_length": 16}, 1)
    decode = specs["decode"]
    inputs, outputs = geometry.fitted(decode["inputs"], decode["outputs"], filled)
    shapes = {s["name"]: s["shape"] for s in inputs}
    assert shapes["past_key_values.1.key"] == [1, 2, 16, 32]
    assert shapes["past_key_values.1.value"] == [1, 2, 16, 16]
    assert shapes["past_key_values.0.value"] == [1, 1, 16, 16]
    planned = {s["name"]: s["shape"] for s in decode["inputs"]}
    assert planned["past_key_values.1.key"] == [1, 1, 16, 32]  # config.json's heads
    assert planned["past_key_values.1.value"] == [1, 1, 16, 16]  # its v_head_dim
    assert [s["name"] for s in inputs] == list(planned)
    assert inputs[:3] == decode["inputs"][:3] and outputs == decode["outputs"]
    assert all(s["kind"] == "lm_past" for s in inputs[3:])


def test_fewer_cached_layers_than_planned_rename_the_buffers_and_outputs() -> None:
    """A model that caches fewer layers than config.json counts: one buffer and one present
    output per cached layer, numbered as the cache numbers them."""
    past = [{"name": f"past_key_values.{i}.{p}", "dtype": "float32", "shape": [1, 2, 8, 4],
             "kind": "lm_past"} for i in range(3) for p in ("key", "value")]
    step = [{"name": "input_ids", "shape": [1, 1]}, *past]
    presents = [f"present.{i}.{p}" for i in range(3) for p in ("key", "value")]
    layers = [((2, 4), (2, 4)), ((1, 6), (1, 2))]
    inputs, outputs = geometry.fitted(step, ["logits", *presents], layers)
    assert [s["name"] for s in inputs] == ["input_ids", *[s["name"] for s in past[:4]]]
    assert inputs[-1]["shape"] == [1, 1, 8, 2] and inputs[-2]["shape"] == [1, 1, 8, 6]
    assert outputs == ["logits", *presents[:4]]
    assert geometry.fitted([{"name": "input_ids"}], ["logits", *presents], layers)[1] == \
        outputs  # the prefill graph: its outputs only
    assert geometry.described(layers + layers[1:]) == (
        "1 layer of key 2x4, value 2x4; 2 layers of key 1x6, value 1x2")


def test_a_forward_that_adds_cache_layers_is_refused() -> None:
    """Dory runs its recurrent section twice, each time into cache layers its forward adds to
    the cache the config makes: a decode graph fed that cache could not make them again, so
    the geometry is refused in one sentence that says so."""
    model = tiny("DoryForCausalLM", num_hidden_layers=3, n_input_layers=1, n_output_layers=1,
                 layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    with pytest.raises(geometry.Uncarried, match=r"adds 1 key/value cache layer of its own "
                                                  r"in its forward \(4 after a prompt, 3 in"):
        geometry.model_cache(model)


def test_a_layer_that_keeps_more_than_keys_and_values_is_named() -> None:
    """A cache layer holding other tensors of tokens (DeepSeek-V4's compressor buffers) is not
    carried by one key and one value buffer: the reason names the layer, its class and what it
    keeps. A scalar (the sliding window's size) is not such state, nor an indexed layer's
    indexer keys, which only choose index_topk tokens of a context the plan keeps within it."""
    from types import SimpleNamespace

    from transformers.cache_utils import DynamicIndexedLayer

    kv = {"keys": torch.ones(1, 1, 2, 4), "values": torch.ones(1, 1, 2, 4)}
    plain = SimpleNamespace(**kv, _sliding_window_tensor=torch.tensor(64))
    indexed = DynamicIndexedLayer()
    indexed.keys, indexed.values, indexed.indexer_keys = kv["keys"], kv["values"], torch.ones(
        1, 2, 8)
    assert geometry.uncarried("M", 2, [plain, indexed]) is None
    compressing = SimpleNamespace(**kv, buffer_kv={"compressor": torch.ones(1, 2, 8)},
                                  compressed_kv={"compressor": None})
    why = geometry.uncarried("M", 2, [plain, compressing])
    assert why is not None and why.startswith(
        "M's cache keeps more than keys and values in layer 1 (transformers' SimpleNamespace: "
        "buffer_kv)")
