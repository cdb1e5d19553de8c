"""Composite encoder-decoders keep their encoder's fields in an `encoder` part of config.json:
T5Gemma (a text encoder and decoder of one family), transformers' EncoderDecoderModel (any text
encoder and decoder) and SpeechEncoderDecoderModel (any speech encoder, any text decoder),
whose forward reads a generic `inputs`. The encoder's input, its width, its vocabulary and the
positions its convolutions give are read from that part."""

from __future__ import annotations

from typing import Any

import pytest

from planner.models import forwards, specs
from planner.models import tasks as T

BERT = {"model_type": "bert", "vocab_size": 30522, "hidden_size": 64,
        "max_position_embeddings": 512, "type_vocab_size": 2}
WAV2VEC2 = {"model_type": "wav2vec2", "hidden_size": 48, "feat_extract_norm": "group",
            "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_stride": [5, 2, 2, 2, 2, 2, 2]}
TEXT_PAIR = {"model_type": "encoder-decoder", "architectures": ["EncoderDecoderModel"],
             "is_encoder_decoder": True, "decoder_start_token_id": 101,
             "encoder": BERT, "decoder": {**BERT, "hidden_size": 32, "is_decoder": True,
                                          "add_cross_attention": True}}
SPEECH_PAIR = {"model_type": "speech-encoder-decoder",
               "architectures": ["SpeechEncoderDecoderModel"], "is_encoder_decoder": True,
               "decoder_start_token_id": 101, "encoder": WAV2VEC2,
               "decoder": {**BERT, "is_decoder": True, "add_cross_attention": True}}
T5GEMMA = {"model_type": "t5gemma", "architectures": ["T5GemmaForConditionalGeneration"],
           "is_encoder_decoder": True,
           "encoder": {"model_type": "t5_gemma_module", "vocab_size": 256, "hidden_size": 64,
                       "max_position_embeddings": 128},
           "decoder": {"model_type": "t5_gemma_module", "vocab_size": 256, "hidden_size": 64,
                       "max_position_embeddings": 128, "is_decoder": True}}


def graphs(info: dict[str, Any], task: str, preproc: dict[str, Any] | None = None,
           ) -> dict[str, Any]:
    return specs.graph_specs(info, preproc or {}, task, T.guess_modality(info),
                             {"decoder_cache": False})


def test_a_composites_encoder_part_says_what_it_reads() -> None:
    # the composite's own forward takes `inputs`; its encoder part's model reads the waveform
    assert forwards.main_input("speech-encoder-decoder", "SpeechEncoderDecoderModel") == \
        "inputs"
    assert forwards.encoder_reads(SPEECH_PAIR) == "input_values"
    assert forwards.encoder_reads(TEXT_PAIR) == "input_ids"
    assert T.guess_modality(SPEECH_PAIR) == T.SPEECH2TEXT
    assert T.guess_modality(TEXT_PAIR) == T.guess_modality(T5GEMMA) == T.TEXT2TEXT
    # a composite whose encoder part names no type transformers knows says nothing
    assert forwards.encoder_reads({**SPEECH_PAIR, "encoder": {"model_type": "nope"}}) is None


def test_a_text_pairs_encoder_inputs_and_width_come_from_its_encoder_part() -> None:
    got = graphs(TEXT_PAIR, "text2text-generation")
    ids = next(s for s in got["encoder"]["inputs"] if s["name"] == "input_ids")
    assert ids["max"] == 30521  # the encoder's vocabulary
    states = next(s for s in got["decoder"]["inputs"] if s["name"] == "encoder_hidden_states")
    assert states["shape"][-1] == 64  # the encoder's width, not the decoder's 32
    # T5Gemma: nothing at the top level, all in its parts
    got = graphs(T5GEMMA, "text2text-generation")
    states = next(s for s in got["decoder"]["inputs"] if s["name"] == "encoder_hidden_states")
    assert states["shape"][-1] == 64
    assert got["encoder"]["inputs"][0]["max"] == 255


def test_the_encoder_parts_fields_stay_over_the_top_levels() -> None:
    # transformers' own example sets the composite's vocab_size to the decoder's
    info = {**TEXT_PAIR, "vocab_size": 300, "encoder": {**BERT, "vocab_size": 100},
            "max_position_embeddings": 64}
    merged = specs.encoder_config(info)
    assert merged["vocab_size"] == 100 and merged["hidden_size"] == 64
    assert merged["max_position_embeddings"] == 512  # the encoder's own table
    assert merged["model_type"] == "encoder-decoder"
    got = graphs(info, "text2text-generation")
    ids = next(s for s in got["encoder"]["inputs"] if s["name"] == "input_ids")
    assert ids["max"] == 99
    assert specs.encoder_config(BERT) is BERT  # a config without parts is read as it is


def test_a_speech_pairs_positions_come_from_its_encoder_parts_convolutions() -> None:
    got = graphs(SPEECH_PAIR, "automatic-speech-recognition",
                 {"sampling_rate": 16000, "feature_size": 1})
    (spec,) = got["encoder"]["inputs"]
    assert (spec["name"], spec["shape"]) == ("input_values", [1, 160000])
    # wav2vec 2.0's unpadded convolutions over 10 s at 16 kHz: 499 positions, its width 48
    states = next(s for s in got["decoder"]["inputs"] if s["name"] == "encoder_hidden_states")
    assert states["shape"] == [1, 499, 48]


def test_a_speech_pair_without_its_encoders_convolutions_is_refused() -> None:
    bare = {**SPEECH_PAIR, "encoder": {k: v for k, v in WAV2VEC2.items()
                                       if not k.startswith("conv_")}}
    with pytest.raises(specs.ConfigError, match="convolutions"):
        graphs(bare, "automatic-speech-recognition", {"sampling_rate": 16000,
                                                      "feature_size": 1})
