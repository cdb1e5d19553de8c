"""A speech encoder-decoder's encoder is fed by the name its class's forward takes, read from
transformers' source: SpeechT5's speech-to-text reads the waveform (`input_values`) though its
config.json counts mel bins (for its speech output), Cohere ASR reads filter-bank frames
(`input_features`) though nothing in its config.json says it is speech; the positions their
encoders give come from their convolutions (wav2vec 2.0's listed kernels and strides, a
Conformer's subsampling)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from planner.models import forwards, specs
from planner.models import tasks as T

SPEECHT5 = {"model_type": "speecht5", "architectures": ["SpeechT5ForSpeechToText"],
            "is_encoder_decoder": True, "num_mel_bins": 80, "hidden_size": 768,
            "vocab_size": 81, "conv_kernel": [10, 3, 3, 3, 3, 2, 2],
            "conv_stride": [5, 2, 2, 2, 2, 2, 2], "max_text_positions": 450}
COHERE = {"model_type": "cohere_asr", "architectures": ["CohereAsrForConditionalGeneration"],
          "is_encoder_decoder": True, "hidden_size": 1024, "vocab_size": 16384,
          "max_position_embeddings": 1024,
          "encoder_config": {"model_type": "parakeet_encoder", "num_mel_bins": 128,
                             "hidden_size": 1024, "subsampling_factor": 8,
                             "subsampling_conv_kernel_size": 3,
                             "subsampling_conv_stride": 2}}
RATE = {"sampling_rate": 16000}


def encoder(info: dict[str, Any], preproc: dict[str, Any]) -> dict[str, Any]:
    graphs = specs.graph_specs(info, preproc, "automatic-speech-recognition",
                               T.guess_modality(info), {"decoder_cache": False})
    return graphs


def test_the_forward_says_what_an_encoder_decoder_reads() -> None:
    assert forwards.main_input("speecht5", "SpeechT5ForSpeechToText") == "input_values"
    assert forwards.main_input("cohere_asr", "CohereAsrForConditionalGeneration") == \
        "input_features"
    assert forwards.main_input("bart", "BartForConditionalGeneration") == "input_ids"
    assert forwards.main_input("bart", "NoSuchClass") is None
    assert T.guess_modality(SPEECHT5) == T.guess_modality(COHERE) == T.SPEECH2TEXT
    # a text encoder-decoder whose config.json counts mel bins is still read as text
    assert T.guess_modality({**SPEECHT5, "model_type": "bart",
                             "architectures": ["BartForConditionalGeneration"]}) == T.TEXT2TEXT


def test_speecht5_reads_the_waveform_through_its_feature_encoder() -> None:
    graphs = encoder(SPEECHT5, {**RATE, "feature_size": 80})  # its mel targets' width
    (spec,) = graphs["encoder"]["inputs"]
    assert (spec["name"], spec["shape"], spec["kind"]) == ("input_values", [1, 160000],
                                                           "waveform")
    # 10 s at 16 kHz through wav2vec 2.0's unpadded convolutions: 499 positions
    assert graphs["decoder"]["inputs"][1]["shape"] == [1, 499, 768]


def test_cohere_asr_reads_frames_through_its_conformer_subsampling() -> None:
    graphs = encoder(COHERE, {**RATE, "feature_size": 128, "hop_length": 160})
    (spec,) = graphs["encoder"]["inputs"]
    assert (spec["name"], spec["shape"]) == ("input_features", [1, 1000, 128])
    # three stride-2 convolutions of kernel 3, padded 1: 1000 -> 500 -> 250 -> 125
    assert graphs["decoder"]["inputs"][1]["shape"] == [1, 125, 1024]


def test_a_subsampling_that_is_not_a_power_of_its_stride_is_not_guessed() -> None:
    odd = {**COHERE["encoder_config"], "subsampling_factor": 6}
    assert specs.encoder_convs({**COHERE, "encoder_config": odd}, None) == ()


def test_diff_is_exported_as_torch_computes_it(tmp_path) -> None:
    """transformers checks a traced decoder's position ids for packed sequences with
    torch.diff (Cohere ASR's decoder, traced without a mask), which TorchScript's exporter has
    no symbolic for."""
    import onnxruntime as ort
    import torch

    from executors.runtime import torchops

    class Diffs(torch.nn.Module):
        def forward(self, p, b):
            return (torch.diff(p, prepend=p[:, :1] - 1, dim=-1), torch.diff(p, n=2, dim=1),
                    torch.diff(b, dim=-1))

    torchops.register()
    args = (torch.tensor([[0, 1, 2, 5, 6, 0, 1]]), torch.tensor([[True, False, False, True]]))
    path = tmp_path / "diff.onnx"
    torch.onnx.export(Diffs(), args, str(path), input_names=["p", "b"], dynamo=False,
                      opset_version=17)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"p": args[0].numpy(), "b": args[1].numpy()})
    for mine, want in zip(got, Diffs()(*args), strict=True):
        np.testing.assert_array_equal(mine, want.numpy())


@pytest.mark.parametrize("kernel", [400, 10])
def test_a_waveform_too_short_for_a_kernel_gives_no_position(kernel: int) -> None:
    """The fewest samples that give an encoder's positions are searched from 16 up: a length
    shorter than its first kernel gives none (a wav2vec 2.0 encoder's 10: the search once
    failed there)."""
    import torch

    from executors.samples.text import _positions_counter

    class Convolves(torch.nn.Module):
        config = None

        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(1, 4, kernel, stride=5)

        def forward(self, input_values, return_dict=True):
            out = self.conv(input_values[:, None]).transpose(1, 2)
            return type("Out", (), {"last_hidden_state": out})()

        def get_encoder(self):
            return self

    count = _positions_counter(Convolves(), "input_values", None)
    assert count(kernel - 1) == 0 and count(kernel) == 1 and count(kernel + 5) == 2


def test_a_random_init_speecht5_is_an_encoder_decoder_by_its_class_defaults() -> None:
    """A random-init config names only the fields it sets: no architectures, no
    `is_encoder_decoder` (SpeechT5's config class sets it), no convolution lists. Its class's
    defaults say it is an encoder-decoder reading the waveform through wav2vec 2.0's
    convolutions, loaded as the class transformers' speech sequence-to-sequence Auto class
    makes (not automatic speech recognition's Auto class, CTC's)."""
    info = {"model_type": "speecht5", "hidden_size": 64, "vocab_size": 1000,
            "num_mel_bins": 16}
    assert forwards.is_encoder_decoder(info)
    assert not forwards.is_encoder_decoder({**info, "is_encoder_decoder": False})
    assert T.guess_modality(info) == T.SPEECH2TEXT
    assert T.detect({"task": "automatic-speech-recognition", "model_class": None}, info) == \
        ("automatic-speech-recognition", "SpeechT5ForSpeechToText")
    assert forwards.seq2seq_class({**info, "architectures": ["X"]}) is None
    (spec,) = encoder(info, RATE)["encoder"]["inputs"]
    assert (spec["name"], spec["shape"]) == ("input_values", [1, 160000])
    assert encoder(info, RATE)["decoder"]["inputs"][1]["shape"] == [1, 499, 64]
    # an encoder-only type keeps the task's own Auto class
    assert T.detect({"task": "automatic-speech-recognition", "model_class": None},
                    {"model_type": "wav2vec2", "vocab_size": 32})[1] is None
