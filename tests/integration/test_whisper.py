"""Whisper is speech recognition with an encoder of log-mel features (from its feature
extractor, on synthesized speech) and a text decoder: planned, built, verified and evaluated
(WER against PyTorch's transcripts, decoding from the start and forced tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.models import tasks as T
from planner.planning import plan_from_overrides
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
