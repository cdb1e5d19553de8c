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
    specs = [{"name": n} for n in ("inputs_embeds", "position_ids", "attention_mask")]
    specs += [{"name": f"past_key_values.{i}.{p}", "shape": [1, 2, 32, 8]}
              for i in range(CONFIG["num_hidden_layers"]) for p in ("key", "value")]
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


def test_layers_of_their_own_cache_geometry_get_no_genai_config(tmp_path: Path) -> None:
    """genai's decoder says one head_size and num_key_value_heads for every layer: a model whose
    per_layer_config gives a layer its own has no genai_config.json (modelplan's loop runs it),
    and its host cache holds each layer at the layer's own width."""
    import torch

    from executors.generation.cache import static_entries

    own = {**CONFIG, "per_layer_config": {"1": {"head_dim": 16}}}
    described = bundle("past_sequence_length", tmp_path,
                       runs_on={"ep": "cpu", "backend": None, "provider_options": {}})
    assert genai.config_for(own, described, {}, tmp_path) is None
    assert genai.config_for(CONFIG, described, {}, tmp_path) is not None

    class Layer:
        def __init__(self, width: int) -> None:
            self.keys = self.values = torch.ones(1, 2, 3, width)

    feed = static_entries([Layer(8), Layer(16)], 3, [1, 2, 32, 8])
    assert {n: v.shape for n, v in feed.items()} == {
        "past_key_values.0.key": (1, 2, 32, 8), "past_key_values.0.value": (1, 2, 32, 8),
        "past_key_values.1.key": (1, 2, 32, 16), "past_key_values.1.value": (1, 2, 32, 16)}
    assert feed["past_key_values.1.key"][:, :, :3].all() and \
        not feed["past_key_values.1.key"][:, :, 3:].any()


def test_a_cache_genai_cannot_describe_gets_no_genai_config(tmp_path: Path) -> None:
    """Keys and values of their own widths (a latent attention's latent and rotary key), or a
    token graph whose buffers the model shaped otherwise than config.json says: no
    genai_config.json, whose one head_size would be wrong for them."""
    cpu = {"ep": "cpu", "backend": None, "provider_options": {}}
    described = bundle("past_sequence_length", tmp_path, runs_on=cpu)
    latent = {**CONFIG, "kv_lora_rank": 8, "qk_rope_head_dim": 8}
    assert genai.config_for(latent, described, {}, tmp_path) is None
    wider = bundle("past_sequence_length", tmp_path, runs_on=cpu)
    wider["graphs"]["decode"]["inputs"][-1]["shape"] = [1, 2, 32, 16]  # the model's values
    assert genai.config_for(CONFIG, wider, {}, tmp_path) is None
    fewer = bundle("past_sequence_length", tmp_path, runs_on=cpu)
    del fewer["graphs"]["decode"]["inputs"][-2:]  # a layer the model gave no cache
    assert genai.config_for(CONFIG, fewer, {}, tmp_path) is None


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
        {"qnn": {"backend_type": "htp", "soc_model": "60"}}]


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


def whisper_bundle(frames: int, cross: bool = True) -> dict[str, Any]:
    """bundle.json of a Whisper build: genai's layout (the encoder gives the cross entries, the
    decoder takes no mask), or the static cache's (a cross graph, a masked decoder)."""
    names = [{"name": n} for n in ("cross.0.key", "cross.0.value")]
    encoder = {"model": "encoder_model.onnx", "outputs": [{"name": "last_hidden_state"},
                                                          *(names if cross else [])],
               "inputs": [{"name": "input_features", "shape": [1, 80, frames]}]}
    decoder = {"model": "decoder_model.onnx", "outputs": [{"name": "logits"}],
               "inputs": [{"name": "input_ids"}, {"name": "past_key_values.0.key"},
                          *([] if cross else [{"name": "attention_mask"}])]}
    graphs = {"encoder": encoder, "decoder": decoder}
    if not cross:
        graphs["cross"] = {"model": "cross_model.onnx", "outputs": names,
                           "inputs": [{"name": "encoder_hidden_states"}]}
    return {"graphs": graphs, "runs_on": {"ep": "cpu", "backend": None, "provider_options": {}}}


WHISPER = {"model_type": "whisper", "d_model": 64, "decoder_layers": 2,
           "decoder_attention_heads": 2, "max_target_positions": 448, "vocab_size": 100,
           "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}


def test_a_whisper_bundle_in_genais_layout_gets_genais_whisper_config(tmp_path: Path) -> None:
    from executors.generation import genai_speech

    bundle = whisper_bundle(3000)
    preprocessor = {"feature_size": 80, "n_fft": 400, "hop_length": 160, "chunk_length": 30}
    assert genai_speech.write(tmp_path, WHISPER, bundle, preprocessor) is None
    model = json.loads((tmp_path / "genai_config.json").read_text())["model"]
    assert model["type"] == "whisper" and model["context_length"] == 448
    encoder, decoder = model["encoder"], model["decoder"]
    assert encoder["filename"] == "encoder_model.onnx"
    assert encoder["inputs"] == {"audio_features": "input_features"}
    assert encoder["outputs"]["encoder_hidden_states"] == "last_hidden_state"
    assert encoder["outputs"]["cross_present_value_names"] == \
        decoder["inputs"]["cross_past_value_names"] == "cross.%d.value"
    assert decoder["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert decoder["outputs"]["present_value_names"] == "present.%d.value"
    assert (decoder["num_hidden_layers"], decoder["head_size"]) == (2, 32)
    audio = json.loads((tmp_path / "audio_processor_config.json").read_text())
    mel = audio["feature_extraction"]["sequence"][-1]["operation"]
    assert mel["type"] == "LogMelSpectrum" and mel["attrs"]["n_mel"] == 80


@pytest.mark.parametrize(("config", "bundle", "why"), [
    (WHISPER, whisper_bundle(200), "feeds 3000 log-mel frames and the encoder takes 200"),
    (WHISPER, whisper_bundle(3000, cross=False), "static cache's"),
    ({**WHISPER, "model_type": "marian"}, whisper_bundle(3000), "no runner for model_type"),
])
def test_a_bundle_genais_whisper_runner_does_not_read_gets_no_genai_config(
        tmp_path: Path, config: dict[str, Any], bundle: dict[str, Any], why: str) -> None:
    from executors.generation import genai_speech

    assert why in str(genai_speech.write(tmp_path, config, bundle, {}))
    assert not list(tmp_path.iterdir())
