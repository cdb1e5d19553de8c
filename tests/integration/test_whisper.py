"""Whisper is speech recognition with an encoder of log-mel features (from its feature
extractor, on synthesized speech) and a text decoder: planned, built, verified and evaluated
(WER against PyTorch's transcripts, decoding from the start and forced tokens). Moonshine's
encoder takes the waveform itself, by the name its feature extractor gives it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.models import tasks as T
from planner.planning import plan_from_overrides
from tests.checkpoints import text_checkpoint
from tests.conftest import run_cli
from tests.integration.conftest import run_json, step

WHISPER = ("model=tiny_random", "model.random_init.model_type=whisper", "perf=none")


def test_whisper_is_speech_recognition_from_log_mel_features() -> None:
    real = {"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
            "is_encoder_decoder": True, "num_mel_bins": 80, "max_source_positions": 1500,
            "max_target_positions": 448, "d_model": 384, "vocab_size": 51865}
    assert T.detect({"task": None, "model_class": None}, real) == (
        "automatic-speech-recognition", "WhisperForConditionalGeneration")
    assert T.guess_modality({**real, "model_type": "other"}) == T.SPEECH2TEXT
    ir = plan_from_overrides([*WHISPER, "target=cpu", "quant=none"]).to_json()
    encoder = next(s for s in ir["steps"] if s["id"] == "encoder.export")["params"]
    assert [(s["name"], s["shape"], s["kind"]) for s in encoder["inputs"]] == [
        ("input_features", [1, 80, 200], "mel_features")]  # 100 positions: 200 frames
    decoder = next(s for s in ir["steps"] if s["id"] == "decoder.export")["params"]
    # the cached decoder by default: on the CPU in onnxruntime-genai's layout, the encoder gives
    # the cross keys and values and the decoder reads a free past (its positions counted from
    # its length); quantized or on HTP one token over a static cache, the cross entries from a
    # cross graph
    names = [s["name"] for s in decoder["inputs"]]
    assert names[0] == "input_ids" and "attention_mask" not in names and decoder["dynamic"]
    assert "past_key_values.0.key" in names and "cross.0.key" in names
    assert "cross.export" not in {s["id"] for s in ir["steps"]}
    for other in (["target=qnn_htp"], ["target=cpu", "quant=w8a16_pc"]):  # compiled, quantized
        ir = plan_from_overrides([*WHISPER, *other]).to_json()
        decoder = next(s for s in ir["steps"] if s["id"] == "decoder.export")["params"]
        names = [s["name"] for s in decoder["inputs"]]
        assert names[:3] == ["input_ids", "position_ids", "attention_mask"]
        assert "cross.export" in {s["id"] for s in ir["steps"]}


@pytest.mark.parametrize("target", ["cpu", pytest.param("qnn_htp", marks=pytest.mark.slow)])
def test_whisper_builds_and_transcribes_like_pytorch(tmp_path: Path, target: str) -> None:
    extra = ["eval=task", "eval.dataset.samples=3"] if target == "cpu" else []
    code, record, err = run_json(*WHISPER, f"target={target}", "quant=w8a16_pc", *extra,
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    quantize = step(record, "encoder.quantize")["metrics"]
    assert "speech via the model's feature extractor" in str(quantize)
    for graph in ("encoder", "decoder"):
        assert step(record, f"{graph}.verify")["metrics"]["cosine_mean"] > 0.99
    # the bundle generates PyTorch's transcript, teacher-forced step by step
    gen = step(record, "verify_generation")["metrics"]
    assert gen["token_agreement"] >= 0.9 and gen["cosine_mean"] > 0.99
    assert gen["new_tokens"] == 4 * 16 and "wer_vs_pytorch" in gen
    if target == "cpu":
        assert gen["token_agreement"] == 1.0 and gen["wer_vs_pytorch"] == 0.0
        ev = step(record, "eval")["metrics"]
        assert ev["metric"] == "wer" and ev["eval_verdict"] == "PASS"
        assert ev["scores"]["fp32_onnx"]["wer"] == ev["scores"]["pytorch"]["wer"] == 0.0


# 2 layers and 2 heads in each part; untied and widely initialized, so that a random model's
# tokens follow the speech (tied at transformers' init it repeats its start token)
MOONSHINE = {**{f"{part}_{field}": 2 for part in ("encoder", "decoder")
                for field in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads")},
             "tie_word_embeddings": False, "initializer_range": 0.2, "pad_token_id": 0,
             "bos_token_id": 101, "eos_token_id": 102, "decoder_start_token_id": 101}
SAMPLES = 32000  # 2 s at 16 kHz: 82 encoder positions


@pytest.mark.slow  # 26-50 s on the shared 2-core machine
def test_moonshine_transcribes_a_waveform_as_transformers_does(tmp_path: Path) -> None:
    """A tiny Moonshine with its feature extractor (a waveform, feature_size 1) builds for the
    CPU in fp32 (with export=dynamo, which builds it as TorchScript does):
    the encoder takes `input_values` [1, samples]; verify, verify_generation and eval feed it
    synthesized speech; `modelplan generate --audio` transcribes a WAV file into the tokens
    transformers' own `generate` gives for the same samples."""
    import numpy as np
    import torch
    import transformers

    from executors.samples.preprocessors import write_preprocessor

    ckpt = text_checkpoint(tmp_path / "ckpt", cls="MoonshineForConditionalGeneration",
                           model_type="moonshine", **MOONSHINE)
    assert write_preprocessor("moonshine", transformers.AutoConfig.from_pretrained(ckpt), ckpt,
                              {}) == "Wav2Vec2FeatureExtractor"
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", "export=dynamo",
                                 f"export.shapes.audio_samples={SAMPLES}", "target=cpu",
                                 "quant=none", "perf=none", "verify.samples=1",
                                 "eval=task", "eval.dataset.samples=1", store=tmp_path / "store",
                                 outputs=tmp_path / "out")
    assert code == 0, err
    encoder = onnx_inputs(step(record, "encoder.export")["outputs"]["model.onnx"])
    assert encoder == [("input_values", [1, SAMPLES])]
    verify = step(record, "encoder.verify")["metrics"]
    assert verify["data"] == "speech via the model's feature extractor"
    assert verify["cosine_min"] > 0.9999
    gen = step(record, "verify_generation")["metrics"]
    assert gen["token_agreement"] == 1.0 and gen["wer_vs_pytorch"] == 0.0, gen
    ev = step(record, "eval")["metrics"]
    assert ev["metric"] == "wer" and ev["eval_verdict"] == "PASS"
    assert ev["scores"]["fp32_onnx"]["wer"] == ev["scores"]["pytorch"]["wer"] == 0.0
    folder = Path(record["published"]["bundle.json"]).parent
    tokens, audio, rate = generated_from_speech(folder, tmp_path, 8)
    audio = np.pad(audio[:SAMPLES], (0, max(0, SAMPLES - len(audio))))
    values = transformers.AutoFeatureExtractor.from_pretrained(str(folder))(
        audio, sampling_rate=rate, return_tensors="pt").input_values
    model = transformers.MoonshineForConditionalGeneration.from_pretrained(str(ckpt)).eval()
    with torch.no_grad():
        want = model.generate(input_values=values, max_new_tokens=8, do_sample=False,
                              num_beams=1)[0, 1:].tolist()  # after the start token
    assert len(set(tokens)) > 2 and tokens == want, (tokens, want)



def generated_from_speech(folder: Path, tmp_path: Path,
                          new_tokens: int) -> tuple[list[int], Any, int]:
    """`modelplan generate --audio` on a spoken sentence: its tokens, and the waveform and
    rate it read (for transformers' own `generate` on the same audio)."""
    import soundfile

    from executors.samples import media

    wav = tmp_path / "speech.wav"
    soundfile.write(wav, media.speaker().say("the cat sat on the mat"), media.RATE)
    mine = run_cli("generate", str(folder), "--audio", str(wav), "--new-tokens",
                   str(new_tokens), "--json")
    assert mine.returncode == 0, mine.stderr
    audio, rate = soundfile.read(wav, dtype="float32")
    return json.loads(mine.stdout)["tokens"], audio, rate

def onnx_inputs(path: str) -> list[tuple[str, list[int]]]:
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    return [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in graph.input]


def test_speech2text_transcribes_filter_bank_frames_as_transformers_does(
        tmp_path: Path) -> None:
    """A tiny random Speech2Text takes its feature extractor's frames first, by the name the
    extractor gives them (`input_features` [1, 400 frames, 80]: the 100 positions its two
    stride-2 convolutions make); verify feeds it synthesized speech, and `modelplan generate
    --audio` gives transformers' own `generate` tokens for the same frames."""
    import numpy as np
    import torch
    import transformers


    code, record, err = run_json("model=tiny_random", "model.random_init.model_type=speech_to_text",
                                 "+model.random_init.config.init_std=0.2",
                                 "+model.random_init.config.tie_word_embeddings=false",
                                 "target=cpu",
                                 "quant=none", "perf=none", "verify.samples=1",
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    assert onnx_inputs(step(record, "encoder.export")["outputs"]["model.onnx"]) == [
        ("input_features", [1, 400, 80])]
    assert step(record, "encoder.verify")["metrics"]["data"] == \
        "speech via the model's feature extractor"
    assert "encoder states of the torch encoder" in step(record, "decoder.verify")["metrics"]["data"]
    assert step(record, "verify_generation")["metrics"]["token_agreement"] == 1.0
    folder = Path(record["published"]["bundle.json"]).parent
    tokens, audio, rate = generated_from_speech(folder, tmp_path, 8)
    frames = transformers.AutoFeatureExtractor.from_pretrained(str(folder))(
        audio, sampling_rate=rate, return_tensors="np").input_features[0]
    frames = np.pad(frames[:400], ((0, max(0, 400 - len(frames))), (0, 0)))[None]
    checkpoint = Path(next(p for k, p in step(record, "resolve")["outputs"].items()
                           if k.endswith("config.json"))).parent
    model = transformers.Speech2TextForConditionalGeneration.from_pretrained(
        str(checkpoint)).eval()
    with torch.no_grad():
        want = model.generate(input_features=torch.from_numpy(frames), max_new_tokens=8,
                              do_sample=False, num_beams=1)[0, 1:].tolist()
    eos = model.config.eos_token_id
    assert len(set(tokens)) > 2 and tokens == (want[:-1] if want[-1:] == [eos] else want), \
        (tokens, want)


# speech encoder-decoders no catalogue entry names, fed by the name their forward takes
# (config fields beyond tests/checkpoints.py's TINY: each part 2 layers, 2 heads, narrow)
UNLISTED_SPEECH = {
    # the waveform (`input_values`) through wav2vec 2.0's convolutions, though its config.json
    # counts mel bins (for its speech output)
    "speecht5": ("SpeechT5ForSpeechToText", {
        **{f"{part}_{field}": value for part in ("encoder", "decoder")
           for field, value in (("layers", 2), ("attention_heads", 2), ("ffn_dim", 128))},
        "conv_dim": [32] * 7, "num_conv_pos_embeddings": 16, "num_mel_bins": 16}),
    # filter-bank frames (`input_features`) through a Conformer's subsampling; nothing in its
    # config.json says speech but its forward; its decoder traced without a mask checks the
    # positions for packed sequences with torch.diff
    "cohere_asr": ("CohereAsrForConditionalGeneration", {"encoder_config": {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 2, "intermediate_size": 128, "num_mel_bins": 16,
        "subsampling_conv_channels": 16}}),
}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(UNLISTED_SPEECH))
def test_an_unlisted_speech_model_reads_what_its_forward_takes(tmp_path: Path,
                                                               model_type: str) -> None:
    import transformers

    from executors.samples.preprocessors import write_preprocessor

    cls, fields = UNLISTED_SPEECH[model_type]
    ckpt = text_checkpoint(tmp_path / "ckpt", cls=cls, model_type=model_type,
                           **{**fields, "pad_token_id": 0, "bos_token_id": 101,
                              "eos_token_id": 102, "decoder_start_token_id": 101})
    write_preprocessor(model_type, transformers.AutoConfig.from_pretrained(ckpt), ckpt, {})
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", "target=cpu",
                                 "quant=none", "perf=none", "verify.samples=1",
                                 "export.shapes.audio_samples=16000",
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    (name, shape), = onnx_inputs(step(record, "encoder.export")["outputs"]["model.onnx"])
    assert (name, len(shape)) == (("input_values", 2) if model_type == "speecht5" else
                                  ("input_features", 3))
    assert step(record, "encoder.verify")["metrics"]["data"] == \
        "speech via the model's feature extractor"
    gen = step(record, "verify_generation")["metrics"]
    assert gen["token_agreement"] == 1.0 and gen["cosine_min"] > 0.9999, gen
