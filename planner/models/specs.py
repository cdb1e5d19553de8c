"""Input and output specs of the graphs a build exports, derived at plan time (so they are in
the keys) from config.json, preprocessor_config.json and `export.shapes`.

A spec is {name, dtype, shape, min, max, kind}; `kind` says what real data feeds it (token ids,
a mask, pixels, a waveform...), which calibration and verification read.
"""

from __future__ import annotations

import math
from typing import Any

from planner.errors import ConfigError
from planner.models import automap, forwards
from planner.models import tasks as T

DEFAULT_SEQUENCE = 128
DEFAULT_DECODER_SEQUENCE = 32
DEFAULT_QUERIES = 2          # text queries per image for zero-shot detection
DEFAULT_RATE = 16000
SPEECH_SECONDS = 10          # a speech recognizer's waveform, when export.shapes does not say


def _spec(name: str, dtype: str, shape: list[int], lo: float, hi: float,
          kind: str) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "min": lo, "max": hi, "kind": kind}


def weights_dtype(info: dict[str, Any]) -> str | None:
    """The dtype config.json says the checkpoint's weights were saved in (`dtype`, or
    `torch_dtype` before transformers 5), its text model's when the top level says none."""
    for part in (info, info.get("text_config") or {}, info.get("decoder") or {}):
        for key in ("dtype", "torch_dtype"):
            if isinstance(part.get(key), str):
                return part[key].removeprefix("torch.")
    return None


def position_limit(info: dict[str, Any], mt: T.ModelType | None) -> int | None:
    """The longest token sequence the model's position table takes (offsets counted)."""
    if mt is not None and not mt.absolute_positions:
        return None
    table = info.get("max_position_embeddings")
    if not isinstance(table, int):
        return None
    return table - (mt.position_offset if mt else 0)


def sequence_length(shapes: dict[str, Any], limit: int | None, key: str = "sequence_length",
                    default: int = DEFAULT_SEQUENCE) -> int:
    asked = shapes.get(key)
    if asked is None:
        return min(default, limit) if limit else default
    if limit is not None and asked > limit:
        raise ConfigError(f"export.shapes.{key}: {asked} is longer than the model's position "
                          f"table allows ({limit} tokens); set export.shapes.{key}={limit} "
                          "or less")
    return asked


def text_inputs(info: dict[str, Any], mt: T.ModelType | None, batch: int,
                seq: int) -> list[dict[str, Any]]:
    vocab = info.get("vocab_size")
    if not vocab:
        raise ConfigError(f"export.inputs: cannot derive text inputs for model_type "
                          f"{info.get('model_type')!r} (config.json has no vocab_size); set "
                          "export.inputs to a list of {name, dtype, shape, min, max}")
    names = mt.text_inputs if mt else ("input_ids", "attention_mask")
    types = info.get("type_vocab_size") or 0
    out = []
    for name in names:
        if name == "input_ids":
            out.append(_spec(name, "int64", [batch, seq], 0, vocab - 1, "token_ids"))
        elif name == "attention_mask":
            out.append(_spec(name, "int64", [batch, seq], 0, 1, "attention_mask"))
        elif name == "token_type_ids" and types >= 1:
            out.append(_spec(name, "int64", [batch, seq], 0, max(types, 1) - 1, "token_types"))
        elif name == "bbox":
            out.append(_spec(name, "int64", [batch, seq, 4], 0, 1000, "boxes"))
    return out


def image_size(info: dict[str, Any], preproc: dict[str, Any], mt: T.ModelType | None,
               shapes: dict[str, Any]) -> tuple[int, int]:
    """(height, width): export.shapes.image_size, else the image processor's, else config.json's,
    else the model type's usual size."""
    asked = shapes.get("image_size")
    if asked is not None:
        return (asked, asked) if isinstance(asked, int) else (asked[0], asked[1])
    for key in ("crop_size", "size"):
        size = preproc.get(key)
        if key == "crop_size" and not preproc.get("do_center_crop", True):
            continue
        if isinstance(size, dict):
            if "height" in size and "width" in size:
                return size["height"], size["width"]
            if "shortest_edge" in size and key == "crop_size":
                return size["shortest_edge"], size["shortest_edge"]
        elif isinstance(size, int) and key == "crop_size":
            return size, size
    for source in (info, info.get("vision_config") or {}, info.get("encoder") or {},
                   info.get("backbone_config") or {}):
        got = source.get("image_size")
        if isinstance(got, int):
            return got, got
        if isinstance(got, list | tuple) and len(got) == 2:
            return int(got[0]), int(got[1])
    size = preproc.get("size")
    if isinstance(size, dict) and "shortest_edge" in size:
        return size["shortest_edge"], size["shortest_edge"]
    if mt is not None and mt.image_size:
        return mt.image_size, mt.image_size
    raise ConfigError(f"export.shapes.image_size: the checkpoint says no image size (model_type "
                      f"{info.get('model_type')!r}); set export.shapes.image_size=<pixels>")


def pixel_inputs(info: dict[str, Any], preproc: dict[str, Any], mt: T.ModelType | None,
                 shapes: dict[str, Any], batch: int) -> list[dict[str, Any]]:
    h, w = image_size(info, preproc, mt, shapes)
    vision = info.get("vision_config") or info.get("encoder") or info
    channels = vision.get("num_channels") or 3
    return [_spec("pixel_values", "float32", [batch, channels, h, w], -3.0, 3.0, "pixels")]


def audio_inputs(info: dict[str, Any], preproc: dict[str, Any], shapes: dict[str, Any],
                 batch: int) -> list[dict[str, Any]]:
    if info.get("model_type") == "audio-spectrogram-transformer" or "num_mel_bins" in info:
        frames = preproc.get("max_length") or info.get("max_length") or 1024
        mels = preproc.get("num_mel_bins") or info.get("num_mel_bins") or 128
        return [_spec("input_values", "float32", [batch, frames, mels], -2.0, 2.0,
                      "spectrogram")]
    rate = preproc.get("sampling_rate") or DEFAULT_RATE
    samples = shapes.get("audio_samples") or rate
    return [_spec("input_values", "float32", [batch, samples], -1.0, 1.0, "waveform")]


def graph_specs(info: dict[str, Any], preproc: dict[str, Any], task: str, modality: str,
                shapes: dict[str, Any], on_host: list[str] | tuple[str, ...] = ()
                ) -> dict[str, dict[str, Any]]:
    """graph name -> {"inputs": [...], "outputs": [...]}: one graph ("model"), or the encoder
    and decoder of a sequence-to-sequence model."""
    mt = T.model_type_of(info)
    batch = shapes.get("batch_size") or 1
    outputs = T.task_outputs(task, info)
    if modality == T.TEXT:
        text = info.get("text_config") or info if info.get("model_type") == "clip" else info
        seq = sequence_length(shapes, position_limit(text, mt))
        inputs = text_inputs(text, mt, batch, seq)
        if mt is not None and mt.modality == T.TEXT2TEXT and isinstance(
                info.get("eos_token_id"), int):
            # an encoder-decoder's classifier pools at the end token (BART): every sequence
            # the graph is fed, random ones too, must end in it
            inputs[0]["end_id"] = info["eos_token_id"]
        return {"model": {"inputs": inputs, "outputs": outputs}}
    if modality == T.IMAGE:
        return {"model": {"inputs": pixel_inputs(info, preproc, mt, shapes, batch),
                          "outputs": outputs}}
    if modality == T.AUDIO:
        return {"model": {"inputs": audio_inputs(info, preproc, shapes, batch),
                          "outputs": outputs}}
    if modality == T.TEXT_IMAGE:
        return {"model": {"inputs": _text_image_inputs(info, preproc, mt, task, shapes, batch),
                          "outputs": outputs}}
    if modality == T.CAUSAL:
        from planner.models import generation

        return generation.lm_graph_specs(info, shapes, batch, tuple(on_host))
    if modality == T.CAUSAL_UNCACHED:
        from planner.models import generation

        return generation.uncached_graph_specs(info, shapes, batch)
    return _encoder_decoder(info, preproc, mt, modality, shapes, batch, outputs)


def _text_image_inputs(info: dict[str, Any], preproc: dict[str, Any], mt: T.ModelType | None,
                       task: str, shapes: dict[str, Any], batch: int) -> list[dict[str, Any]]:
    text = info.get("text_config") or {}
    seq = sequence_length(shapes, position_limit(text, mt))
    queries = batch * (shapes.get("text_queries") or DEFAULT_QUERIES) \
        if task == "zero-shot-object-detection" else batch * (shapes.get("text_queries") or 1)
    ids = text_inputs({"vocab_size": text.get("vocab_size", 49408)}, None, queries, seq)
    return ids + pixel_inputs(info, preproc, mt, shapes, batch)


def speech_features(info: dict[str, Any], batch: int) -> list[dict[str, Any]]:
    """Whisper's encoder input: log-mel features [B, mel bins, frames], two frames per
    encoder position (its convolutions halve them), from its feature extractor."""
    mels = int(info.get("num_mel_bins") or 80)
    frames = 2 * int(info.get("max_source_positions") or 1500)
    return [_spec("input_features", "float32", [batch, mels, frames], -2.0, 2.0,
                  "mel_features")]


def speech_inputs(info: dict[str, Any], preproc: dict[str, Any], mt: T.ModelType | None,
                  shapes: dict[str, Any], batch: int) -> tuple[list[dict[str, Any]], int]:
    """A speech encoder's inputs and the positions it gives, as its feature extractor makes
    them and by the name it gives them: the waveform itself for one value per time step
    (`feature_size` 1, `input_values` [batch, samples]); Whisper's log-mel window (config.json
    says `num_mel_bins`: [batch, mel bins, frames]); else filter-bank frames, frames first
    (Speech2Text: `input_features` [batch, frames, features], one per hop). As many samples
    as `export.shapes.audio_samples` says, else SPEECH_SECONDS' (or as many frames as the
    encoder's positions take)."""
    rate = preproc.get("sampling_rate") or DEFAULT_RATE
    asked = shapes.get("audio_samples")
    convs = encoder_convs(info, mt)
    reads = forwards.encoder_reads(info)  # its forward's first input, where its source says
    if forwards.ENCODER_DECODER_MODALITIES.get(reads or "") != T.SPEECH2TEXT:
        reads = None  # not a speech input (SpeechEncoderDecoderModel's generic `inputs`)
    waveform = 1 if mt is not None and mt.audio_convs else None
    if reads == "input_values" or preproc.get("feature_size", waveform) == 1:
        samples = asked or SPEECH_SECONDS * rate
        name = reads or (preproc.get("model_input_names") or ["input_values"])[0]
        return ([_spec(name, "float32", [batch, samples], -1.0, 1.0, "waveform")],
                positions_of(info, convs, samples))
    if "num_mel_bins" in info:
        return speech_features(info, batch), int(info.get("max_source_positions") or 1500)
    hop = preproc.get("hop_length") or rate // 100  # 10 ms frames
    frames = (asked or SPEECH_SECONDS * rate) // hop
    limit = info.get("max_source_positions")
    per_position = math.prod(stride for _, stride, _ in convs)
    if asked is None and isinstance(limit, int):
        frames = min(frames, limit * per_position)
    width = (info.get("encoder_config") or {}).get("num_mel_bins") or \
        info.get("input_feat_per_channel") or preproc.get("feature_size") or 80
    positions = positions_of(info, convs, frames)
    if isinstance(limit, int) and positions > limit:
        raise ConfigError(f"export.shapes.audio_samples: {asked} samples make {positions} "
                          f"encoder positions, and the model has {limit}; set "
                          f"export.shapes.audio_samples={limit * per_position * hop} or less")
    name = (preproc.get("model_input_names") or ["input_features"])[0]
    return [_spec(name, "float32", [batch, frames, width], -5.0, 5.0, "spectrogram")], positions


def encoder_convs(info: dict[str, Any], mt: T.ModelType | None) -> tuple[tuple[int, int, int],
                                                                          ...]:
    """(kernel, stride, padding) of a speech encoder's convolutions over time: a Conformer's
    subsampling (`subsampling_factor`, `subsampling_conv_kernel_size` and `_stride`, in
    config.json or its encoder_config or encoder part), the `conv_kernel` and `conv_stride`
    lists (wav2vec 2.0's, a SpeechEncoderDecoderModel's encoder part's),
    else its model type's, or config.json's `conv_kernel_sizes` at its model type's stride."""
    # a random-init config names only the fields it sets: its class's defaults under them
    info = {**automap.config_defaults(str(info.get("model_type", ""))), **info}
    sub = next((part for part in (info.get("encoder_config"), info.get("encoder"))
                if isinstance(part, dict)), info)
    factor, kernel, stride = (sub.get(f"subsampling_{k}") for k in
                              ("factor", "conv_kernel_size", "conv_stride"))
    if all(isinstance(v, int) and v > 1 for v in (factor, kernel, stride)) and \
            stride ** round(math.log(factor, stride)) == factor:
        # a Conformer's subsampling (Parakeet's): strided convolutions, half a kernel padded
        return ((kernel, stride, (kernel - 1) // 2),) * round(math.log(factor, stride))
    kernels, strides = (sub.get(k, info.get(k)) for k in ("conv_kernel", "conv_stride"))
    if isinstance(kernels, list | tuple) and isinstance(strides, list | tuple) and \
            len(kernels) == len(strides):
        # wav2vec 2.0's feature encoder (SpeechT5's speech prenet): unpadded, as listed
        return tuple((int(k), int(st), 0) for k, st in zip(kernels, strides, strict=True))
    if mt is None:
        return ()
    kernels = info.get("conv_kernel_sizes")
    if mt.kernel_stride and isinstance(kernels, list):
        return tuple((int(k), mt.kernel_stride, int(k) // 2) for k in kernels)
    return mt.audio_convs


def positions_of(info: dict[str, Any], convs: tuple[tuple[int, int, int], ...],
                 steps: int) -> int:
    """The positions a speech encoder's convolutions make of `steps` samples or frames."""
    if not convs:
        raise ConfigError(f"model: the speech encoder of model_type {info.get('model_type')!r} "
                          "convolves its input, and the positions its convolutions make of it "
                          "are not declared for this type (planner/models/tasks.py declares "
                          "them by type); build a speech model of a declared type")
    positions = steps
    for kernel, stride, padding in convs:
        positions = (positions + 2 * padding - kernel) // stride + 1
    if positions < 1:
        raise ConfigError(f"export.shapes.audio_samples: {steps} samples or frames are too few "
                          f"for the encoder's convolutions (kernels {[c[0] for c in convs]}); "
                          "set export.shapes.audio_samples higher")
    return positions


def encoder_config(info: dict[str, Any]) -> dict[str, Any]:
    """The fields a text encoder's inputs and width are read from: those of its `encoder` part
    where a composite config keeps one (T5Gemma; transformers' EncoderDecoderModel, whose parts
    are any two models and whose top level may repeat the decoder's vocabulary), that part's
    text part's over them (T5Gemma 2's encoder reads text and images), the top level's where
    the parts say nothing; the model type stays the composite's."""
    part = info.get("encoder")
    if not isinstance(part, dict):
        return info
    text = part.get("text_config")  # an encoder of text and images (T5Gemma 2's)
    return {**{k: v for k, v in info.items() if v is not None and k != "encoder"},
            **{k: v for k, v in part.items() if v is not None and k != "text_config"},
            **(text if isinstance(text, dict) else {}), "model_type": info.get("model_type")}


def _encoder_decoder(info: dict[str, Any], preproc: dict[str, Any], mt: T.ModelType | None,
                     modality: str, shapes: dict[str, Any], batch: int,
                     outputs: list[str]) -> dict[str, dict[str, Any]]:
    decoder_info = info.get("decoder") or info.get("text_config") or info
    # a translator with a vocabulary per side (FSMT) names them src_ and tgt_vocab_size
    vocab = decoder_info.get("vocab_size") or decoder_info.get("tgt_vocab_size")
    limit = decoder_info.get("max_target_positions") or position_limit(decoder_info, mt)
    dec_seq = sequence_length(shapes, limit, "decoder_sequence_length", DEFAULT_DECODER_SEQUENCE)
    if modality == T.SPEECH2TEXT:
        encoder, enc_seq = speech_inputs(info, preproc, mt, shapes, batch)
        enc_info = encoder_config(info)
        width, cross = enc_info.get("d_model") or enc_info.get("hidden_size"), []
    elif modality == T.TEXT2TEXT:
        enc_info = encoder_config(info)
        enc_seq = sequence_length(shapes, position_limit(enc_info, mt))
        encoder = text_inputs({**enc_info, "vocab_size": enc_info.get("vocab_size")
                               or enc_info.get("src_vocab_size")}, None, batch, enc_seq)
        width = enc_info.get("d_model") or enc_info.get("hidden_size")
        cross = [_spec("encoder_attention_mask", "int64", [batch, enc_seq], 0, 1,
                       "encoder_attention_mask")]
    else:
        encoder = pixel_inputs(info, preproc, mt, shapes, batch)
        enc = info.get("encoder") or info.get("vision_config") or {}
        _, _, h, w = encoder[0]["shape"]
        patch = enc.get("patch_size") or 16
        enc_seq = (h // patch) * (w // patch) + 1
        width = enc.get("hidden_size")
        cross = []
    if not vocab or not width:
        raise ConfigError(f"export.inputs: cannot derive the decoder's inputs for model_type "
                          f"{info.get('model_type')!r} (no vocab_size or hidden size in "
                          "config.json); set export.inputs")
    states = _spec("encoder_hidden_states", "float32", [batch, enc_seq, width], -3.0, 3.0,
                   "encoder_hidden_states")
    from planner.models import seq2seq

    if seq2seq.cached(info, shapes.get("decoder_cache")):
        return {"encoder": {"inputs": encoder, "outputs": list(T.ENCODER_OUTPUTS)},
                **seq2seq.cached_graphs(info, states, cross, dec_seq, vocab, outputs)}
    decoder = [_spec("input_ids", "int64", [batch, dec_seq], 0, vocab - 1, "decoder_ids"),
               states, *cross]
    return {"encoder": {"inputs": encoder, "outputs": list(T.ENCODER_OUTPUTS)},
            "decoder": {"inputs": decoder, "outputs": outputs}}
