"""genai_config.json of a causal LM's bundle (executors/generation/genai.py): onnxruntime-genai's
plain decoder over a token graph of a free past, else its decoder pipeline over the graphs and
the host's layers, with the EP the build used; and the check `modelplan generate` makes of it
against bundle.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from executors.generation import genai
from executors.generation.bundle import BundleError

CONFIG = {"model_type": "llama", "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2,
          "bos_token_id": 1}


def layer(path: Path, name: str, out: str, past: int | str = 8) -> None:
    """A one-node graph taking `name` (and a cache input of `past` entries) and giving `out`."""
    past_value = helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT,
                                               [1, 2, past, 8])
    graph = helper.make_graph([helper.make_node("Identity", [name], [out])], "g",
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 1]),
                               past_value],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 1])])
    onnx.save(helper.make_model(graph), str(path))


def bundle(past: int | str, tmp: Path, **extra: Any) -> dict[str, Any]:
    specs = [{"name": n} for n in ("inputs_embeds", "position_ids", "attention_mask",
                                   "past_key_values.0.key", "past_key_values.0.value")]
    layer(tmp / "decode_model.onnx", "inputs_embeds", "hidden_states", past)
    return {"graphs": {"prefill": {"model": "prefill_model.onnx", "inputs": specs[:3],
                                   "outputs": [{"name": "hidden_states"}]},
                       "decode": {"model": "decode_model.onnx", "inputs": specs,
                                  "outputs": [{"name": "hidden_states"}]}},
            "prefill_length": 8, "context_length": 32, **extra}


def test_a_token_graph_of_a_free_past_is_genais_plain_decoder(tmp_path: Path) -> None:
    made = genai.config_for(CONFIG, bundle("past_sequence_length", tmp_path,
                                           runs_on={"ep": "cpu", "backend": None,
                                                    "provider_options": {}}), {}, tmp_path)
    model = made["model"]
    assert model["type"] == "decoder" and model["decoder"]["filename"] == "decode_model.onnx"
    assert "pipeline" not in model["decoder"] and "sliding_window" not in model["decoder"]
    assert model["decoder"]["session_options"]["provider_options"] == []
    assert model["decoder"]["num_key_value_heads"] == 2 and model["decoder"]["head_size"] == 8
    assert made["search"]["max_length"] == model["context_length"] == 32


def test_fixed_graphs_are_a_pipeline_with_the_host_layers_and_the_build_s_ep(
        tmp_path: Path) -> None:
    layer(tmp_path / "embed_model.onnx", "input_ids", "inputs_embeds")
    layer(tmp_path / "head_model.onnx", "hidden_states", "logits")
    described = bundle(32, tmp_path, runs_on={"ep": "qnn", "backend": "htp",
                                              "provider_options": {"soc_model": 60}},
                       host={"head": "head_model.onnx", "embeddings": "embed_model.onnx"})
    model = genai.config_for(CONFIG, described, {"eos_token_id": [2, 3]}, tmp_path)["model"]
    assert model["type"] == "decoder-pipeline" and model["pad_token_id"] == 2
    stages = model["decoder"]["pipeline"][0]
    assert list(stages) == ["embeddings", "prefill", "decode", "head"]
    assert stages["prefill"]["run_on_token_gen"] is False and stages["prefill"]["run_on_prompt"]
    assert stages["decode"]["run_on_prompt"] is False and stages["decode"]["run_on_token_gen"]
    assert stages["head"]["is_lm_head"] and not stages["embeddings"]["is_lm_head"]
    assert stages["embeddings"]["outputs"] == ["inputs_embeds"]
    assert model["decoder"]["sliding_window"]["window_size"] == 8
    assert model["decoder"]["session_options"]["provider_options"] == [
        {"qnn": {"soc_model": "60"}}]


@pytest.mark.parametrize(("change", "said"), [
    ({"context_length": 64}, "says context_length 64, and its graphs hold 32 tokens"),
    ({"decoder": {"filename": "model.onnx"}}, "names 'model.onnx', which is not one of"),
    ({"decoder": 3}, "is not an onnxruntime-genai config of a language model")])
def test_generate_refuses_a_genai_config_that_is_not_the_bundle_s(
        tmp_path: Path, change: dict[str, Any], said: str) -> None:
    described = bundle("past_sequence_length", tmp_path,
                       runs_on={"ep": "cpu", "backend": None, "provider_options": {}})
    made = genai.config_for(CONFIG, described, {}, tmp_path)
    assert genai.read(tmp_path, described) is None  # none written: none read
    (tmp_path / genai.GENAI_CONFIG).write_text(json.dumps(made))
    assert genai.eos_ids(genai.read(tmp_path, described)) == {2}
    made["model"].update(change)
    (tmp_path / genai.GENAI_CONFIG).write_text(json.dumps(made))
    with pytest.raises(BundleError, match=said) as err:
        genai.read(tmp_path, described)
    assert "\n" not in str(err.value)
