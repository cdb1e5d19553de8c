"""A causal LM whose layers keep a recurrent state (executors/generation/recurrent.py): which
layers keep one is read from transformers' cache classes for the config, the graphs' inputs
and outputs from the cache the model fills on one token (each such layer's states in place of
its keys and values), a decode step fed those states continues the prompt as PyTorch does,
and the host replaces the states each step instead of writing them into a slot."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from executors.generation.cache import StaticCache
from executors.generation.modules import lm_io, lm_step
from executors.generation.recurrent import STATE_KIND, recurrent_layers
from planner.models.tiny import tiny_fields

SLOTS = 16
# Qwen3-Next's gated delta net, its linear-attention heads made tiny too
QWEN3_NEXT = {"layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 2,
              "linear_num_value_heads": 4, "linear_key_head_dim": 16,
              "linear_value_head_dim": 16}


def config_of(model_type: str, **fields: Any) -> Any:
    from transformers import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[model_type]
    return config_cls(**{**tiny_fields(config_cls), **fields})


def qwen3_next() -> Any:
    import transformers

    torch.manual_seed(0)
    return transformers.Qwen3NextForCausalLM(config_of("qwen3_next", **QWEN3_NEXT)).eval()


@pytest.mark.parametrize(("model_type", "fields", "layers"), [
    ("mamba", {}, [0, 1]),                                              # state-space only
    ("lfm2", {"layer_types": ["conv", "full_attention"]}, [0]),         # a convolution
    ("lfm2", {"layer_types": ["full_attention", "full_attention"]}, []),  # attention only
    ("falcon_h1", {}, [0, 1]),                                          # beside attention
    # linear attention beside attention, as config.json's layer_types say
    ("qwen3_next", {"layer_types": ["linear_attention", "full_attention"]}, [0]),
    ("lara_mini", {"num_hidden_layers": 3, "layer_types": [
        "linear_attention", "sliding_attention", "full_attention"]}, [0]),
    ("jamba", {}, [0, 1]),  # its layer kinds from its attention period, not a list
])
def test_the_layers_that_keep_a_state_are_read_from_the_cache_classes(
        model_type: str, fields: dict[str, Any], layers: list[int]) -> None:
    from transformers import DynamicCache

    cache = DynamicCache(config=config_of(model_type, **fields))
    assert list(recurrent_layers(cache)) == layers


def test_a_cache_transformers_cannot_step_is_refused_in_one_line() -> None:
    """Linear-attention layers alone (as the class defaults of Bamba and Granite's hybrids
    give a tiny model): transformers' masks ask the cache for a length only attention layers
    have; refused naming the layers."""
    import transformers

    from executors.generation.recurrent import RecurrentState

    torch.manual_seed(0)
    config = config_of("qwen3_next", **{**QWEN3_NEXT, "layer_types": ["linear_attention"] * 2})
    model = transformers.Qwen3NextForCausalLM(config).eval()
    with pytest.raises(RecurrentState, match=r"Qwen3NextForCausalLM keeps a recurrent state in "
                       r"layers 0, 1, and its forward .* fails \(ValueError: `get_seq_length`"):
        lm_io(model, plan_specs(2), ["logits"], True)


def plan_specs(layers: int) -> list[dict[str, Any]]:
    """The decode graph's inputs as the plan declares them: a key/value pair per layer."""
    past = [{"name": f"past_key_values.{i}.{part}", "dtype": "float32",
             "shape": [1, 2, SLOTS, 32], "min": -8.0, "max": 8.0, "kind": "lm_past"}
            for i in range(layers) for part in ("key", "value")]
    return [{"name": "input_ids", "dtype": "int64", "shape": [1, 1], "kind": "lm_step_ids"},
            *past]


def test_a_recurrent_layer_gives_its_states_in_place_of_keys_and_values() -> None:
    model = qwen3_next()
    outputs = ["logits", *(f"present.{i}.{p}" for i in range(2) for p in ("key", "value"))]
    specs, given = lm_io(model, plan_specs(2), outputs, reads_cache=True)
    states = {s["name"]: s["shape"] for s in specs if s.get("kind") == STATE_KIND}
    # conv: (q, k, v widths) x kernel 4; recurrent: value heads x key width x value width
    assert states == {"past_key_values.0.conv.0": [1, 2 * 2 * 16 + 4 * 16, 4],
                      "past_key_values.0.recurrent.0": [1, 4, 16, 16]}
    assert [s["name"] for s in specs if s.get("kind") == "lm_past"] == [
        "past_key_values.1.key", "past_key_values.1.value"]
    assert given == ["logits", "present.0.conv.0", "present.0.recurrent.0", "present.1.key",
                     "present.1.value"]
    prompt_specs, prompt_given = lm_io(model, plan_specs(0), outputs, reads_cache=False)
    assert prompt_specs == plan_specs(0) and prompt_given == given  # it gives them back only


def test_attention_layers_alone_keep_the_plan_s_inputs() -> None:
    import transformers

    config = config_of("lfm2", layer_types=["full_attention", "full_attention"])
    model = transformers.Lfm2ForCausalLM(config).eval()
    outputs = ["logits", *(f"present.{i}.{p}" for i in range(2) for p in ("key", "value"))]
    assert lm_io(model, plan_specs(2), outputs, True) == (plan_specs(2), outputs)


def feed_of(out: tuple[Any, ...], names: list[str], seen: int) -> dict[str, Any]:
    """A step's past from a forward's presents: keys and values in `SLOTS` slots, the first
    `seen` filled, states as they are."""
    past = {}
    for name, value in zip(names, out[1:], strict=True):
        if name.endswith(("key", "value")):
            value = torch.nn.functional.pad(value, (0, 0, 0, SLOTS - value.shape[2]))
        past[name.replace("present", "past_key_values")] = value
    return past


def step_mask(seen: int) -> Any:
    mask = torch.zeros(1, SLOTS + 1, dtype=torch.long)
    mask[0, :seen] = mask[0, -1] = 1
    return mask


def test_a_step_fed_the_states_continues_the_prompt_and_zero_states_start_it() -> None:
    """The decode step fed the prompt's states and keys and values gives the logits of the
    whole sequence's forward; fed zero states and an empty cache, token by token, it gives
    the prompt's own (what the host does with a prompt shorter than the prefill graph)."""
    model = qwen3_next()
    names = lm_io(model, plan_specs(2), ["logits"], True)[1][1:]
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        whole = model(input_ids=ids).logits[0]
        prompt = lm_step(model, ids[:, :4], torch.ones(1, 4, dtype=torch.long),
                         torch.arange(4)[None])
        step = lm_step(model, ids[:, 4:], step_mask(4), torch.tensor([[4]]),
                       feed_of(prompt, names, 4))
        torch.testing.assert_close(step[0][0, -1], whole[-1], atol=1e-5, rtol=0)
        past = {n: torch.zeros_like(v) for n, v in feed_of(prompt, names, 0).items()}
        for i in range(ids.shape[1]):
            out = lm_step(model, ids[:, i:i + 1], step_mask(i), torch.tensor([[i]]), past)
            torch.testing.assert_close(out[0][0, -1], whole[i], atol=1e-5, rtol=0)
            for name, value in zip(names, out[1:], strict=True):
                held = past[name.replace("present", "past_key_values")]
                if name.endswith(("key", "value")):
                    held[:, :, i] = value[:, :, 0]
                else:
                    held.copy_(value)


def test_the_host_replaces_the_states_and_writes_keys_into_the_next_slot() -> None:
    specs = [{"name": "attention_mask", "shape": [1, 5]},
             {"name": "past_key_values.0.conv.0", "shape": [1, 3, 2]},
             {"name": "past_key_values.1.key", "shape": [1, 1, 4, 2]}]
    cache = StaticCache(specs)
    assert cache.recurrent
    for seen in range(2):
        cache.write({"present.0.conv.0": np.full((1, 3, 2), seen + 1.0, np.float32),
                     "present.1.key": np.full((1, 1, 1, 2), seen + 1.0, np.float32)})
    np.testing.assert_array_equal(cache.buffers["past_key_values.0.conv.0"], 2.0)
    np.testing.assert_array_equal(cache.buffers["past_key_values.1.key"][0, 0, :, 0],
                                  [1.0, 2.0, 0.0, 0.0])
    assert not StaticCache([specs[0], specs[2]]).recurrent


def test_a_bundle_with_states_has_no_genai_config(tmp_path: Any) -> None:
    from executors.generation import genai

    described = {"graphs": {"decode": {"inputs": [{"name": "past_key_values.0.conv.0"}]}}}
    assert genai.config_for({}, described, {}, tmp_path) is None


def test_a_prompt_shorter_than_the_prefill_graph_runs_through_decode() -> None:
    """Padding would run through a recurrent layer's update, and some recurrent forwards over
    several tokens ignore the state fed: a whole first window is read by the prefill graph,
    the rest of the prompt (a shorter prompt all of it) stepped through the decode graph."""
    from executors.generation.decoder_only import LMGraphs

    ran: list[str] = []

    def prefill(feed: dict[str, Any]) -> dict[str, Any]:
        ran.append("prefill")
        return {"logits": np.zeros((1, 4, 3), np.float32),
                "present.0.conv.0": feed["past_key_values.0.conv.0"] + 10}

    def decode(feed: dict[str, Any]) -> dict[str, Any]:
        ran.append("decode")
        return {"logits": np.zeros((1, 1, 3), np.float32),
                "present.0.conv.0": feed["past_key_values.0.conv.0"] + 1}

    lm = LMGraphs(prefill, decode, [{"name": "position_ids", "shape": [1, 4]},
                                    {"name": "attention_mask", "shape": [1, 12 + 4]}],
                  [{"name": "attention_mask", "shape": [1, 12 + 1]},
                   {"name": "past_key_values.0.conv.0", "shape": [1, 3, 2]}])
    lm.prompt([5, 6, 7])
    assert ran == ["decode"] * 3
    np.testing.assert_array_equal(lm.cache.buffers["past_key_values.0.conv.0"], 3.0)
    ran.clear()
    lm.prompt([5, 6, 7, 8, 9])
    assert ran == ["prefill", "decode"]
    np.testing.assert_array_equal(lm.cache.buffers["past_key_values.0.conv.0"], 11.0)
    ran.clear()
    lm.prompt(list(range(1, 10)))
    assert ran == ["prefill"] + ["decode"] * 5
    np.testing.assert_array_equal(lm.cache.buffers["past_key_values.0.conv.0"], 15.0)


def test_pytorch_steps_a_model_whose_forward_names_its_cache_cache() -> None:
    """Mamba's forward takes its cache as `cache` alone: given `past_key_values` it would make
    one of its own and drop the one given (each step from no state)."""
    import transformers

    from executors.generation.decoder_only import TorchLM

    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(config_of("mamba")).eval()
    lm = TorchLM(model)
    with torch.no_grad():
        lm.prompt([5, 6, 7])
        step = lm.step(8)
        whole = model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits[0, -1].numpy()
    np.testing.assert_allclose(step, whole, atol=1e-5)


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba"])
def test_a_state_space_step_over_the_static_mask_carries_the_states(model_type: str) -> None:
    """A model whose layers all keep a state reads its attention mask over its own tokens:
    decode steps given the static graph's mask (slots and token) give the logits and states
    the model's own stepping gives, token after token."""
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config_of(model_type)).eval()
    names = lm_io(model, plan_specs(2), ["logits"], True)[1][1:]
    assert names == [f"present.{i}.{kind}.0" for i in range(2) for kind in ("conv", "recurrent")]
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        own = model(input_ids=ids[:, :4], use_cache=True).cache
        past = feed_of(lm_step(model, ids[:, :4], torch.ones(1, 4, dtype=torch.long),
                               torch.arange(4)[None]), names, 4)
        for i in range(4, ids.shape[1]):
            out = lm_step(model, ids[:, i:i + 1], step_mask(i), torch.tensor([[i]]), past)
            theirs = model(input_ids=ids[:, i:i + 1], cache=own, use_cache=True)
            torch.testing.assert_close(out[0], theirs.logits, atol=1e-5, rtol=0)
            states = [state for layer in own.layers for state in (layer.conv_states[0],
                                                                   layer.recurrent_states[0])]
            for value, state in zip(out[1:], states, strict=True):
                torch.testing.assert_close(value, state, atol=1e-5, rtol=0)
            past = feed_of(out, names, i + 1)


def test_a_forward_taking_a_cache_class_of_its_own_is_refused_in_one_line() -> None:
    """xLSTM's forward takes its xLSTMCache, whose states are not transformers' cache layers
    the graphs carry: refused naming the class, before any trace."""
    import transformers

    from executors.generation.recurrent import RecurrentState

    torch.manual_seed(0)
    model = transformers.xLSTMForCausalLM(config_of("xlstm")).eval()
    with pytest.raises(RecurrentState, match=r"^xLSTMForCausalLM's forward takes a cache class "
                       r"of its own \(xLSTMCache\)"):
        lm_io(model, plan_specs(2), ["logits"], True)
