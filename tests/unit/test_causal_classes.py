"""Which checkpoint classes build as text generation: a language-model head by its name, or
the class the installed transformers' AutoModelForCausalLM loads for the checkpoint's type (a
multimodal class such as Gemma3ForConditionalGeneration, built on its text_config), or the
class its AutoModelForImageTextToText loads (a language model that reads images among its
tokens: Qwen3.5, LLaVA), read from transformers' source without importing it; and a language
model that reads an audio encoder's embeddings, refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from planner.errors import ConfigError
from planner.models import automap
from tests.conftest import run_cli
from tests.unit.test_tasks import checkpoint, export_params, plan

TEXT = {"model_type": "gemma3_text", "vocab_size": 100, "hidden_size": 64, "head_dim": 16,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 128}
VISION = {"model_type": "siglip_vision_model", "hidden_size": 32, "image_size": 32}


def test_the_mappings_read_from_source_are_transformers_own() -> None:
    from transformers.models.auto import modeling_auto

    for name in (automap.CAUSAL_LM, automap.SEQ2SEQ_LM, automap.SPEECH_SEQ2SEQ,
                 automap.IMAGE_TEXT):
        assert automap.mapping(name) == dict(getattr(modeling_auto, name)), name
    assert automap.causal_lm_class("gemma3") == "Gemma3ForConditionalGeneration"


def test_the_class_the_causal_lm_auto_class_loads_builds_on_its_text_config(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, {"model_type": "gemma3",
                                 "architectures": ["Gemma3ForConditionalGeneration"],
                                 "text_config": TEXT, "vision_config": VISION})
    ir = plan(ckpt, "export.shapes.prefill_length=8", "export.shapes.context_length=32")
    resolve = ir["steps"][0]["params"]
    assert (resolve["task"], resolve["model_class"]) == ("text-generation",
                                                         "Gemma3ForConditionalGeneration")
    prefill = {s["name"]: s["shape"] for s in export_params(ir, "prefill.export")["inputs"]}
    assert {n: prefill[n] for n in ("input_ids", "attention_mask", "position_ids")} == {
        "input_ids": [1, 8], "attention_mask": [1, 32 + 8], "position_ids": [1, 8]}
    decode = {s["name"]: s["shape"] for s in export_params(ir, "decode.export")["inputs"]}
    assert decode["past_key_values.2.value"] == [1, 2, 32, 16]  # text_config's geometry
    assert "past_key_values.3.key" not in decode


@pytest.mark.parametrize(("model_type", "cls", "loads"), [
    # AutoModelForCausalLM has no class for these types: their own class, on token ids alone
    ("paligemma", "PaliGemmaForConditionalGeneration", "PaliGemmaForConditionalGeneration"),
    ("llava", "LlavaForConditionalGeneration", "LlavaForConditionalGeneration"),
    # Qwen3.5 ships its checkpoints as the multimodal class; AutoModelForCausalLM loads its
    # text model alone from them, without the vision tower
    ("qwen3_5", "Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"),
])
def test_a_language_model_that_reads_images_among_its_tokens_builds_on_token_ids(
        tmp_path: Path, model_type: str, cls: str, loads: str) -> None:
    """The class AutoModelForImageTextToText loads for the checkpoint's type, whose forward reads
    token ids first, is text generation on its text_config's geometry; its vision tower is
    left out (its graphs take token ids alone)."""
    assert automap.image_text_class(model_type) == cls
    ckpt = checkpoint(tmp_path, {"model_type": model_type, "architectures": [cls],
                                 "text_config": TEXT, "vision_config": VISION})
    ir = plan(ckpt, "export.shapes.prefill_length=8", "export.shapes.context_length=32")
    resolve = ir["steps"][0]["params"]
    assert (resolve["task"], resolve["model_class"]) == ("text-generation", loads)
    decode = {s["name"]: s["shape"] for s in export_params(ir, "decode.export")["inputs"]}
    assert decode["past_key_values.2.value"] == [1, 2, 32, 16]
    assert "pixel_values" not in decode


def test_an_image_text_class_that_reads_pixels_first_is_not_text_generation(
        tmp_path: Path) -> None:
    """BLIP-2's forward reads pixel_values first: it captions an image and has no build from
    token ids alone, so its task is not detected as text generation."""
    ckpt = checkpoint(tmp_path, {"model_type": "blip-2",
                                 "architectures": ["Blip2ForConditionalGeneration"],
                                 "text_config": {**TEXT, "model_type": "opt"},
                                 "vision_config": VISION, "qformer_config": {}})
    with pytest.raises(ConfigError, match="model.task: cannot detect the task"):
        plan(ckpt)


def test_a_class_model_class_names_is_the_class_loaded(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, {"model_type": "qwen3_5",
                                 "architectures": ["Qwen3_5ForConditionalGeneration"],
                                 "text_config": TEXT, "vision_config": VISION})
    ir = plan(ckpt, "model.model_class=Qwen3_5ForConditionalGeneration",
              "export.shapes.prefill_length=8", "export.shapes.context_length=32")
    assert ir["steps"][0]["params"]["model_class"] == "Qwen3_5ForConditionalGeneration"


@pytest.mark.parametrize(("model_type", "cls"), [
    # an encoder-decoder by its config class's default, which its config.json need not say
    ("florence2", "Florence2ForConditionalGeneration"),
    # block diffusion: not token by token
    ("diffusion_gemma", "DiffusionGemmaForBlockDiffusion"),
])
def test_an_image_text_class_that_does_not_generate_token_by_token_is_not_an_lm(
        model_type: str, cls: str) -> None:
    from planner.models.lm_classes import reads_images_among_tokens

    assert automap.image_text_class(model_type) == cls
    info = {"model_type": model_type, "architectures": [cls], "text_config": TEXT,
            "vision_config": VISION}
    assert not reads_images_among_tokens(cls, info)
    assert reads_images_among_tokens(
        "LlavaForConditionalGeneration", {**info, "model_type": "llava"})


@pytest.mark.parametrize(("config", "towers"), [
    ({"model_type": "qwen2_audio", "architectures": ["Qwen2AudioForConditionalGeneration"],
      "audio_config": {"model_type": "qwen2_audio_encoder"}}, "audio_config"),
    ({"model_type": "voxtral", "architectures": ["VoxtralForConditionalGeneration"],
      "audio_config": {"model_type": "voxtral_encoder"}}, "audio_config"),
])
def test_a_language_model_reading_audio_embeddings_is_refused_in_one_line(
        tmp_path: Path, config: dict[str, Any], towers: str) -> None:
    ckpt = checkpoint(tmp_path, {**config, "text_config": {**TEXT, "model_type": "qwen2"}})
    result = run_cli("plan", "model=local_hf", f"model.path={ckpt}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    cls = config["architectures"][0]
    assert f"model: {cls} (model_type {config['model_type']!r}) generates text from what " \
           f"its {towers} encodes" in lines[0]
    assert "save its text model with its text_config as a causal-LM checkpoint" in lines[0]
    assert "quant" not in lines[0]


LM = {"vocab_size": 100, "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 64}


@pytest.mark.parametrize(("model_type", "cls", "fields"), [
    ("openai-gpt", "OpenAIGPTLMHeadModel", {}),
    # its config says use_cache; its cache is hash buckets, which its output does not give
    ("reformer", "ReformerModelWithLMHead", {"use_cache": True, "is_decoder": True}),
])
def test_a_language_model_whose_forward_returns_no_cache_is_one_graph_on_the_prefix(
        tmp_path: Path, model_type: str, cls: str, fields: dict[str, Any]) -> None:
    """No prefill and decode over a cache: one graph of the tokens and their mask, free axes
    for the CPU (fixed by fix_shapes for a compiling target), delivered by uncached_bundle and
    checked by verify_generation."""
    ckpt = checkpoint(tmp_path, {"model_type": model_type, "architectures": [cls], **LM,
                                 **fields})
    ir = plan(ckpt, "export.shapes.context_length=32")
    assert [s["id"] for s in ir["steps"] if s["op"] == "export"] == ["uncached.export"]
    export = export_params(ir, "uncached.export")
    assert [(s["name"], s["shape"]) for s in export["inputs"]] == [
        ("input_ids", [1, 32]), ("attention_mask", [1, 32])]
    assert export["outputs"] == ["logits"] and export.get("dynamic") is True
    bundle = next(s for s in ir["steps"] if s["op"] == "uncached_bundle")
    assert bundle["params"]["context_length"] == 32 and ir["deliverable"] == bundle["id"]
    check = next(s for s in ir["steps"] if s["op"] == "verify_generation")
    assert check["inputs"]["candidate"] == bundle["id"]
    htp = plan(ckpt, "export.shapes.context_length=32", "target=qnn_htp", "quant=w8a16_pc")
    assert [s["op"] for s in htp["steps"] if s["id"].startswith("uncached.")][:2] == [
        "export", "fix_shapes"]
    assert not {"share_context", "genai_stages", "lm_bundle"} & {s["op"] for s in htp["steps"]}
    scored = plan(ckpt, "export.shapes.context_length=32", "eval=task")
    reference = next(s for s in scored["steps"] if s["id"] == "reference_bundle")
    assert reference["op"] == "uncached_bundle" and \
        reference["inputs"]["uncached"].startswith("uncached.")


@pytest.mark.parametrize(("model_type", "cls"), [
    ("xlm", "XLMWithLMHeadModel"), ("xlnet", "XLNetLMHeadModel")])
def test_a_language_model_that_appends_its_own_tokens_to_the_prompt_is_refused_at_plan_time(
        tmp_path: Path, model_type: str, cls: str) -> None:
    """XLM generates by appending its mask token and XLNet a dummy token before each forward
    (their prepare_inputs_for_generation): their next token is not read at the prompt's end."""
    ckpt = checkpoint(tmp_path, {"model_type": model_type, "architectures": [cls], **LM})
    result = run_cli("plan", "model=local_hf", f"model.path={ckpt}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [(f"modelplan: error: model: {cls} (model_type {model_type!r}) keeps no "
                      "key/value cache and generates by appending tokens of its own to the "
                      "prompt before each forward (its prepare_inputs_for_generation), so no "
                      "graph over the prompt's tokens reads the next token at the prompt's "
                      "end; modelplan cannot build it for text generation: choose a checkpoint "
                      "of a causal LM that predicts at the prompt's last token")]


def test_decoder_cache_false_builds_a_cached_lm_as_one_graph_and_true_needs_a_cache(
        tmp_path: Path) -> None:
    """export.shapes.decoder_cache=false: a model whose forward keeps a cache (GPT-2's) built as
    the one graph on the whole prefix (for a cache the graphs cannot carry); =true on a forward
    that keeps none is one line."""
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt").mkdir()
    gpt2 = checkpoint(tmp_path / "gpt2", {"model_type": "gpt2",
                                          "architectures": ["GPT2LMHeadModel"], **LM})
    ir = plan(gpt2, "export.shapes.context_length=32", "export.shapes.decoder_cache=false")
    assert [s["id"] for s in ir["steps"] if s["op"] == "export"] == ["uncached.export"]
    gpt = checkpoint(tmp_path / "gpt", {"model_type": "openai-gpt",
                                        "architectures": ["OpenAIGPTLMHeadModel"], **LM})
    result = run_cli("plan", "model=local_hf", f"model.path={gpt}",
                     "export.shapes.decoder_cache=true")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        ("modelplan: error: export.shapes.decoder_cache=true: OpenAIGPTLMHeadModel's forward "
        "returns no key/value cache (model_type 'openai-gpt'), so there is none for a decode "
        "graph to step over; set export.shapes.decoder_cache=null")]


def test_a_config_that_does_not_say_use_cache_is_read_from_its_forward(tmp_path: Path) -> None:
    """GPT-2's config.json as first published has no use_cache; its forward returns a cache."""
    ckpt = checkpoint(tmp_path, {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
                                 **LM})
    ir = plan(ckpt, "export.shapes.prefill_length=8", "export.shapes.context_length=32")
    assert [s["id"] for s in ir["steps"] if s["op"] == "export"] == ["prefill.export",
                                                                     "decode.export"]


def test_a_text_config_that_omits_fields_takes_its_config_class_defaults(
        tmp_path: Path) -> None:
    """gemma-3-4b-it's config.json as published names six text_config fields; transformers
    gives the rest from Gemma3TextConfig (8 heads, 4 key/value heads of 256, 262208 ids), read
    here from its source."""
    ckpt = checkpoint(tmp_path, {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                        "model_type": "gemma3_text", "num_hidden_layers": 34,
                        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "vision_config": {**VISION, "image_size": 896}})
    ir = plan(ckpt, "export.shapes.prefill_length=8", "export.shapes.context_length=64")
    decode = {s["name"]: s for s in export_params(ir, "decode.export")["inputs"]}
    assert decode["past_key_values.33.key"]["shape"] == [1, 4, 64, 256]
    assert decode["input_ids"]["max"] == 262207
    assert automap.config_defaults("gemma3_text")["num_attention_heads"] == 8
