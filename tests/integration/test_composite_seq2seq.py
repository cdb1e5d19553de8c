"""transformers' composites of any encoder and decoder, saved in bf16 as released checkpoints
are: EncoderDecoderModel (a BERT encoder 64 wide, a BERT decoder 32 wide, so the composite
projects the encoder's states) and SpeechEncoderDecoderModel (a wav2vec 2.0 encoder reading
the waveform, a BERT decoder). Both build for the CPU and generate PyTorch's tokens."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.checkpoints import TOKENIZER_FILES, minilm_dir
from tests.integration.conftest import run_json, step

BERT = {"vocab_size": 30522, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 128}
TOKENS = {"decoder_start_token_id": 101, "pad_token_id": 0, "bos_token_id": 101,
          "eos_token_id": 102}


def composite(dest: Path, speech: bool) -> Path:
    import torch
    import transformers

    decoder = transformers.BertConfig(**{**BERT, "hidden_size": 32, "intermediate_size": 64})
    if speech:
        encoder = transformers.Wav2Vec2Config(
            hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96,
            conv_dim=[16] * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)
        config = transformers.SpeechEncoderDecoderConfig.from_encoder_decoder_configs(
            encoder, decoder)
        cls = transformers.SpeechEncoderDecoderModel
    else:
        encoder = transformers.BertConfig(**BERT)
        config = transformers.EncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
        cls = transformers.EncoderDecoderModel
    for name, value in TOKENS.items():
        setattr(config, name, value)
    torch.manual_seed(0)
    cls(config=config).eval().to(torch.bfloat16).save_pretrained(str(dest))
    for name in TOKENIZER_FILES:
        if (minilm_dir() / name).is_file():
            shutil.copy(minilm_dir() / name, dest / name)
    if speech:  # as such checkpoints ship it: the waveform, one value per sample
        transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000,
                                              return_attention_mask=True).save_pretrained(dest)
    return dest


@pytest.mark.parametrize("speech", [False, True], ids=["text", "speech"])
def test_a_composite_of_any_encoder_and_decoder_generates_as_pytorch_does(
        tmp_path: Path, speech: bool) -> None:
    ckpt = composite(tmp_path / "ckpt", speech)
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", "target=cpu",
                                 "quant=none", "perf=none", "verify.samples=1",
                                 *(["export.shapes.audio_samples=16000"] if speech else []),
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    import onnx

    encoder = onnx.load(step(record, "encoder.export")["outputs"]["model.onnx"],
                        load_external_data=False).graph
    # the encoder part's own input: the waveform, or token ids with their mask
    assert encoder.input[0].name == ("input_values" if speech else "input_ids")
    gen = step(record, "verify_generation")["metrics"]
    assert gen["token_agreement"] == 1.0 and gen["cosine_min"] > 0.9999, gen
