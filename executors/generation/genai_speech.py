"""onnxruntime-genai's files for a Whisper bundle in its layout (planner/models/generation.py
`genai_layout`), written by the bundle step: `genai_config.json` (`model.type: "whisper"`, the
encoder and decoder graphs with their input and output names) and
`audio_processor_config.json` (the log-mel features genai's processor computes from audio,
with the checkpoint's feature extractor's numbers).

genai's Whisper runner feeds the encoder 3000 log-mel frames (30 s), whatever the config says:
a bundle whose encoder takes another length gets neither file (`layout_of` says why)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from executors.generation.encoder_decoder import decoder_positions
from executors.generation.genai import GENAI_CONFIG, cache_names, greedy_search, providers
from planner.models.generation import (
    GENAI_ENCODER_DECODERS,
    GENAI_ENCODER_SECTION,
    GENAI_SECTION,
    GENAI_WHISPER_FRAMES,
)
from planner.models.roles import CACHE, ROLES, Trace
from planner.models.seq2seq import decoder_config, decoder_shape

AUDIO_PROCESSOR = "audio_processor_config.json"


def layout_of(config: dict[str, Any], bundle: dict[str, Any]) -> str | None:
    """Why a bundle is not one genai's Whisper runner reads (None: it is)."""
    if config.get("model_type") not in GENAI_ENCODER_DECODERS:
        return f"onnxruntime-genai has no runner for model_type {config.get('model_type')!r}"
    encoder, decoder = _graphs(bundle)
    cross = [o["name"] for o in encoder["outputs"] if o["name"].startswith(CACHE.cross + ".")]
    if not cross or any(s["name"] == "attention_mask" for s in decoder["inputs"]):
        return ("its graphs are the static cache's (a cross graph, a masked decoder), not "
                "genai's layout")
    frames = encoder["inputs"][0]["shape"][-1]
    if frames != GENAI_WHISPER_FRAMES:
        return (f"genai's Whisper runner feeds {GENAI_WHISPER_FRAMES} log-mel frames and the "
                f"encoder takes {frames} (max_source_positions {frames // 2}, not "
                f"{GENAI_WHISPER_FRAMES // 2})")
    return None


def _graphs(bundle: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    graphs = bundle["graphs"]
    encoder = next(e for g, e in graphs.items() if ROLES[g].trace is Trace.ENCODER)
    decoder = next(e for g, e in graphs.items() if ROLES[g].chain)
    return encoder, decoder


def write(folder: Path, config: dict[str, Any], bundle: dict[str, Any],
          preprocessor: dict[str, Any]) -> str | None:
    """genai_config.json and audio_processor_config.json into `folder` when genai's Whisper
    runner reads the bundle; else nothing, and why not."""
    why = layout_of(config, bundle)
    if why is not None:
        return why
    (folder / GENAI_CONFIG).write_text(json.dumps(genai_config(config, bundle), indent=2))
    (folder / AUDIO_PROCESSOR).write_text(json.dumps(audio_processor(preprocessor), indent=2))
    return None


def genai_config(config: dict[str, Any], bundle: dict[str, Any]) -> dict[str, Any]:
    """genai_config.json of a Whisper bundle in genai's layout: the encoder gives the states and
    every layer's cross keys and values, the decoder reads a free past and the cross entries
    and gives back past + new."""
    encoder, decoder = _graphs(bundle)
    layers, heads, head_dim = decoder_shape(config)
    dec = decoder_config(config)
    width = dec.get("d_model")
    session = {"provider_options": providers(bundle)}
    shape = {"head_size": head_dim, "hidden_size": width, "num_attention_heads": heads,
             "num_hidden_layers": layers, "num_key_value_heads": heads}
    context = decoder_positions(config)
    return {"model": {
        "type": GENAI_ENCODER_DECODERS[config["model_type"]],
        "bos_token_id": config.get("bos_token_id"),
        "eos_token_id": config.get("eos_token_id"), "pad_token_id": config.get("pad_token_id"),
        "context_length": context, "vocab_size": config.get("vocab_size"),
        GENAI_ENCODER_SECTION: {
                    "filename": encoder["model"], "session_options": session, **shape,
                    "inputs": {"audio_features": encoder["inputs"][0]["name"]},
                    "outputs": {"encoder_hidden_states": encoder["outputs"][0]["name"],
                                **cache_names("cross_present", CACHE.cross)}},
        GENAI_SECTION: {
                    "filename": decoder["model"], "session_options": session, **shape,
                    "inputs": {"input_ids": "input_ids", **cache_names("past", CACHE.past),
                               **cache_names("cross_past", CACHE.cross)},
                    "outputs": {"logits": "logits",
                                **cache_names("present", CACHE.present)}}},
        "search": greedy_search(context)}


def audio_processor(preprocessor: dict[str, Any]) -> dict[str, Any]:
    """The feature extraction genai's processor runs (onnxruntime-extensions' operations):
    decode the audio, a short-time Fourier transform, log-mel features, with the numbers of
    the checkpoint's WhisperFeatureExtractor."""
    n_fft = int(preprocessor.get("n_fft", 400))
    hop = int(preprocessor.get("hop_length", 160))
    return {"feature_extraction": {"sequence": [
        {"operation": {"name": "audio_decoder", "type": "AudioDecoder"}},
        {"operation": {"name": "STFT", "type": "STFTNorm",
                       "attrs": {"n_fft": n_fft, "frame_length": n_fft, "hop_length": hop}}},
        {"operation": {"name": "log_mel_spectrogram", "type": "LogMelSpectrum",
                       "attrs": {"chunk_size": int(preprocessor.get("chunk_length", 30)),
                                 "hop_length": hop, "n_fft": n_fft,
                                 "n_mel": int(preprocessor.get("feature_size", 80))}}}]}}


def read(folder: Path, bundle: dict[str, Any]) -> dict[str, Any] | None:
    """A Whisper bundle's genai_config.json (None when it has none), checked against its
    bundle.json: the encoder and decoder files it names are the bundle's graphs."""
    from executors.generation.bundle import BundleError

    path = folder / GENAI_CONFIG
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
        named = [config["model"][part]["filename"]
                 for part in (GENAI_ENCODER_SECTION, GENAI_SECTION)]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise BundleError(f"{path} is not an onnxruntime-genai config of a Whisper model "
                          f"({type(exc).__name__}: {exc}); rebuild the bundle with modelplan "
                          "run") from exc
    encoder, decoder = _graphs(bundle)
    if named != [encoder["model"], decoder["model"]]:
        raise BundleError(f"{path} names {named[0]!r} and {named[1]!r}, and the bundle's "
                          f"encoder and decoder are {encoder['model']!r} and "
                          f"{decoder['model']!r} (bundle.json); rebuild the bundle with "
                          "modelplan run")
    return config
