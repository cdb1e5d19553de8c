"""Task and class detection from config.json, input specs per modality, and the limits a model's
position table sets, on local checkpoint folders (config.json and a weights file: the planner
reads no weights)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.errors import ConfigError
from planner.models import tasks as T
from planner.planning import plan_from_overrides
from tests.conftest import run_cli


def checkpoint(tmp_path: Path, config: dict[str, Any], **files: str) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(config))
    (ckpt / "model.safetensors").write_bytes(b"not read at plan time")
    for name, text in files.items():
        (ckpt / name.replace("__", ".")).write_text(text)
    return ckpt


def plan(ckpt: Path, *overrides: str) -> dict[str, Any]:
    return plan_from_overrides(["model=local_hf", f"model.path={ckpt}", "target=cpu",
                                *overrides]).to_json()


def export_params(ir: dict[str, Any], step: str = "export") -> dict[str, Any]:
    return next(s for s in ir["steps"] if s["id"] == step)["params"]


@pytest.mark.parametrize(("config", "task", "cls"), [
    ({"model_type": "vit", "architectures": ["ViTForImageClassification"], "image_size": 32},
     "image-classification", "ViTForImageClassification"),
    ({"model_type": "wav2vec2", "architectures": ["Wav2Vec2ForCTC"]},
     "automatic-speech-recognition", "Wav2Vec2ForCTC"),
    ({"model_type": "segformer", "architectures": ["SegformerForSemanticSegmentation"]},
     "image-segmentation", "SegformerForSemanticSegmentation"),
    ({"model_type": "roberta", "architectures": ["RobertaForSequenceClassification"],
      "vocab_size": 100, "max_position_embeddings": 66,
      "id2label": {"0": "contradiction", "1": "neutral", "2": "entailment"}},
     "zero-shot-classification", "RobertaForSequenceClassification"),
    ({"model_type": "owlvit", "architectures": ["OwlViTForObjectDetection"],
      "text_config": {"vocab_size": 100, "max_position_embeddings": 16},
      "vision_config": {"image_size": 32}}, "zero-shot-object-detection",
     "OwlViTForObjectDetection"),
    ({"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "d_model": 16,
      "vocab_size": 100, "max_position_embeddings": 64}, "text2text-generation",
     "BartForConditionalGeneration"),
    ({"model_type": "albert", "architectures": ["AlbertForMaskedLM"], "vocab_size": 100},
     "fill-mask", "AlbertForMaskedLM"),  # a type the catalogue does not list: by its fields
])
def test_task_and_class_come_from_config_json(tmp_path: Path, config: dict[str, Any], task: str,
                                               cls: str) -> None:
    preproc = {"preprocessor_config__json": json.dumps({"size": {"height": 40, "width": 40}})}
    ir = plan(checkpoint(tmp_path, config, **preproc))
    resolve = ir["steps"][0]["params"]
    assert (resolve["task"], resolve["model_class"]) == (task, cls)


def test_sentence_transformers_checkpoint_is_sentence_similarity(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, {"model_type": "bert", "architectures": ["BertModel"],
                                 "vocab_size": 100, "type_vocab_size": 2,
                                 "max_position_embeddings": 512}, modules__json="[]")
    params = export_params(plan(ckpt))
    assert params["outputs"] == ["last_hidden_state", "sentence_embedding"]
    assert [s["name"] for s in params["inputs"]] == ["input_ids", "attention_mask",
                                                      "token_type_ids"]


def test_ambiguous_or_impossible_detection_is_one_line(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, {"model_type": "bert", "vocab_size": 100})
    result = run_cli("plan", "model=local_hf", f"model.path={ckpt}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.task: cannot detect the task" in lines[0]
    assert "model_type 'bert', architectures none" in lines[0]
    assert "feature-extraction, fill-mask, text-classification" in lines[0]
    (tmp_path / "b").mkdir()
    unknown = checkpoint(tmp_path / "b", {"model_type": "mystery"})
    result = run_cli("plan", "model=local_hf", f"model.path={unknown}")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "set model.task to one of: feature-extraction" in result.stderr


def test_a_task_the_model_type_cannot_build_names_the_ones_it_can(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, {"model_type": "vit", "image_size": 32})
    with pytest.raises(ConfigError, match="not a task modelplan builds for model_type 'vit'; "
                                          "choose one of: image-feature-extraction, image-cl"):
        plan(ckpt, "model.task=fill-mask")


def test_position_table_limits_the_sequence(tmp_path: Path) -> None:
    """MPNet counts its padding index: a 128-entry table takes 126 tokens."""
    ckpt = checkpoint(tmp_path, {"model_type": "mpnet", "architectures": ["MPNetModel"],
                                 "vocab_size": 100, "max_position_embeddings": 128})
    inputs = export_params(plan(ckpt))["inputs"]
    assert {s["name"]: s["shape"] for s in inputs} == {"input_ids": [1, 126],
                                                        "attention_mask": [1, 126]}
    with pytest.raises(ConfigError) as err:
        plan(ckpt, "export.shapes.sequence_length=200")
    assert "longer than the model's position table allows (126 tokens)" in str(err.value)
    assert "export.shapes.sequence_length=126" in str(err.value)


@pytest.mark.parametrize(("config", "preproc", "shapes", "want"), [
    ({"model_type": "vit", "architectures": ["ViTModel"], "image_size": 224},
     {"size": {"height": 96, "width": 96}}, [], {"pixel_values": [1, 3, 96, 96]}),
    ({"model_type": "vit", "architectures": ["ViTModel"], "image_size": 224}, {},
     ["export.shapes.image_size=64"], {"pixel_values": [1, 3, 64, 64]}),
    ({"model_type": "wav2vec2", "architectures": ["Wav2Vec2Model"]},
     {"sampling_rate": 16000}, [], {"input_values": [1, 16000]}),
    ({"model_type": "wav2vec2", "architectures": ["Wav2Vec2Model"]},
     {"sampling_rate": 16000}, ["export.shapes.audio_samples=32000"],
     {"input_values": [1, 32000]}),
    ({"model_type": "audio-spectrogram-transformer", "architectures": ["ASTForAudioClassification"],
      "max_length": 1024, "num_mel_bins": 128}, {}, [], {"input_values": [1, 1024, 128]}),
    ({"model_type": "layoutlm", "architectures": ["LayoutLMModel"], "vocab_size": 100,
      "type_vocab_size": 2, "max_position_embeddings": 512}, {},
     ["export.shapes.sequence_length=16"],
     {"input_ids": [1, 16], "bbox": [1, 16, 4], "attention_mask": [1, 16],
      "token_type_ids": [1, 16]}),
])
def test_input_specs_per_modality(tmp_path: Path, config: dict[str, Any],
                                  preproc: dict[str, Any], shapes: list[str],
                                  want: dict[str, list[int]]) -> None:
    files = {"preprocessor_config__json": json.dumps(preproc)} if preproc else {}
    inputs = export_params(plan(checkpoint(tmp_path, config, **files), *shapes))["inputs"]
    assert {s["name"]: s["shape"] for s in inputs} == want


MOONSHINE = {"model_type": "moonshine", "architectures": ["MoonshineForConditionalGeneration"],
             "is_encoder_decoder": True, "hidden_size": 64, "vocab_size": 100,
             "max_position_embeddings": 128}
WAVEFORM = {"feature_extractor_type": "Wav2Vec2FeatureExtractor", "feature_size": 1,
            "sampling_rate": 16000}


@pytest.mark.parametrize(("shapes", "samples", "positions"), [
    ([], 160000, 415),  # 10 s: (((160000 - 127) // 64 + 1 - 7) // 3 + 1 - 3) // 2 + 1
    (["export.shapes.audio_samples=32000"], 32000, 82),
])
def test_a_speech_encoder_takes_what_its_feature_extractor_gives(
        tmp_path: Path, shapes: list[str], samples: int, positions: int) -> None:
    """One value per time step from the feature extractor: the encoder takes the waveform by
    the extractor's name, and the decoder as many encoder positions as its convolutions make
    of the samples (Moonshine's, which transformers counts the same way)."""
    ckpt = checkpoint(tmp_path, MOONSHINE, preprocessor_config__json=json.dumps(WAVEFORM))
    ir = plan(ckpt, "quant=none", *shapes)
    assert [(s["name"], s["shape"], s["kind"])
            for s in export_params(ir, "encoder.export")["inputs"]] == [
        ("input_values", [1, samples], "waveform")]
    states = next(s for s in export_params(ir, "decoder.export")["inputs"]
                  if s["name"] == "encoder_hidden_states")
    assert states["shape"] == [1, positions, 64]


S2T = {"model_type": "speech_to_text", "architectures": ["Speech2TextForConditionalGeneration"],
       "is_encoder_decoder": True, "d_model": 64, "vocab_size": 100, "max_source_positions": 100,
       "max_target_positions": 64, "input_feat_per_channel": 80, "conv_kernel_sizes": [5, 5]}
FILTER_BANK = {"feature_extractor_type": "Speech2TextFeatureExtractor", "feature_size": 80,
               "num_mel_bins": 80, "sampling_rate": 16000}


def test_filter_bank_frames_come_frames_first_as_many_as_the_positions_take(
        tmp_path: Path) -> None:
    """Speech2Text's extractor gives [frames, features] under `input_features`; two stride-2
    convolutions take 4 frames a position: 100 positions take 400 frames (4 s, under the 10 s
    default), 2 s of samples 200 frames, and 8 s more positions than the model has."""
    ckpt = checkpoint(tmp_path, S2T, preprocessor_config__json=json.dumps(FILTER_BANK))
    for shapes, frames, positions in (([], 400, 100),
                                      (["export.shapes.audio_samples=32000"], 200, 50)):
        ir = plan(ckpt, "quant=none", *shapes)
        assert [(s["name"], s["shape"], s["kind"])
                for s in export_params(ir, "encoder.export")["inputs"]] == [
            ("input_features", [1, frames, 80], "spectrogram")]
        states = next(s for s in export_params(ir, "decoder.export")["inputs"]
                      if s["name"] == "encoder_hidden_states")
        assert states["shape"] == [1, positions, 64]
    with pytest.raises(ConfigError) as err:
        plan(ckpt, "quant=none", "export.shapes.audio_samples=128000")
    assert str(err.value) == ("export.shapes.audio_samples: 128000 samples make 200 encoder "
                              "positions, and the model has 100; set "
                              "export.shapes.audio_samples=64000 or less")


def test_a_translator_with_a_vocabulary_per_side_takes_each_sides_ids(tmp_path: Path) -> None:
    """FSMT names its vocabularies src_vocab_size and tgt_vocab_size (no vocab_size)."""
    fsmt = {"model_type": "fsmt", "architectures": ["FSMTForConditionalGeneration"],
            "is_encoder_decoder": True, "d_model": 64, "src_vocab_size": 300,
            "tgt_vocab_size": 200, "max_position_embeddings": 64, "decoder_start_token_id": 2}
    ir = plan(checkpoint(tmp_path, fsmt), "quant=none", "export.shapes.sequence_length=16")
    assert export_params(ir, "encoder.export")["inputs"][0]["max"] == 299
    assert export_params(ir, "decoder.export")["inputs"][0]["max"] == 199


def test_too_few_samples_for_the_encoder_is_one_line(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, MOONSHINE, preprocessor_config__json=json.dumps(WAVEFORM))
    with pytest.raises(ConfigError) as err:
        plan(ckpt, "quant=none", "export.shapes.audio_samples=400")
    assert str(err.value).startswith("export.shapes.audio_samples: 400 samples or frames are too few")
    assert "set export.shapes.audio_samples higher" in str(err.value)


def test_encoder_decoder_is_one_plan_with_two_chains() -> None:
    ir = plan_from_overrides(["model=tiny_random", "model.random_init.model_type=marian",
                              "target=qnn_htp", "export.shapes.decoder_cache=false"]).to_json()
    ids = [s["id"] for s in ir["steps"]]
    assert ids.count("resolve") == 1 and ir["deliverable"] == "bundle"
    for graph in ("encoder", "decoder"):
        assert {f"{graph}.{op}" for op in ("export", "quantize", "tag", "compile", "verify",
                                           "perf")} <= set(ids)
        assert any(i.startswith(f"{graph}.legalize") for i in ids)
    bundle = ir["steps"][ids.index("bundle")]
    assert bundle["inputs"] == {"encoder": "encoder.compile", "decoder": "decoder.compile",
                                "source": "resolve"}  # its tokenizer and preprocessor files
    decoder = export_params(ir, "decoder.export")
    assert [s["name"] for s in decoder["inputs"]] == ["input_ids", "encoder_hidden_states",
                                                      "encoder_attention_mask"]


def test_the_cached_decoder_is_the_default_where_it_is_measured() -> None:
    """decoder_cache=null: the cached decoder (and its cross graph) for Marian, the decoder of
    the whole prefix when asked (decoder_cache=false)."""
    def graphs(*extra: str) -> set[str]:
        ir = plan_from_overrides(["model=tiny_random", *extra, "target=cpu"]).to_json()
        return {s["id"].split(".")[0] for s in ir["steps"] if s["op"] == "export"}

    assert graphs("model.random_init.model_type=marian") == {"encoder", "cross", "decoder"}
    assert graphs("model.random_init.model_type=marian",
                  "export.shapes.decoder_cache=false") == {"encoder", "decoder"}


def test_every_task_has_a_schema_entry_and_a_model_type() -> None:
    import schemas

    enum = schemas.load("config")["properties"]["model"]["properties"]["task"]["enum"]
    assert set(enum) - {None} == set(T.TASKS)
    assert {t for mt in T.MODEL_TYPES.values() for t in mt.tasks} == set(T.TASKS)
