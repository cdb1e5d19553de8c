"""Real images and real speech, offline: photographs that scikit-image ships in its wheel, and
the shipped sentences spoken by eSpeak NG (shipped by espeakng-loader), each pushed through
the model's own image processor or feature extractor."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

SENTENCES = Path(__file__).resolve().parent.parent / "data" / "sentences.txt"

# Photographs in scikit-image's wheel (grey ones are made RGB); calibration and verification
# use disjoint photographs (see split()).
PHOTOS = ("astronaut", "cat", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field",
          "camera", "coins", "moon", "clock", "page", "text",
          "chelsea", "retina", "colorwheel", "brick")
VERIFY_PHOTOS = 4          # the last four are held out for verification
RATE = 16000
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@cache
def photo(name: str) -> np.ndarray:
    import skimage.data

    img = np.asarray(getattr(skimage.data, name)())
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3]).astype(np.uint8)


def views(split: str) -> list[np.ndarray]:
    """Distinct images for a split: each photo whole, two 3/4 crops and a mirror image."""
    names = PHOTOS[-VERIFY_PHOTOS:] if split == "verify" else PHOTOS[:-VERIFY_PHOTOS]
    out = []
    for name in names:
        img = photo(name)
        h, w = img.shape[:2]
        out += [img, img[: 3 * h // 4, : 3 * w // 4], img[h // 4:, w // 4:], img[:, ::-1]]
    return out


def image_processor(checkpoint: Path | None) -> Any:
    if checkpoint is None or not (checkpoint / "preprocessor_config.json").is_file():
        return None
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(str(checkpoint), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError):
        return None


def pixels(img: np.ndarray, shape: list[int], processor: Any) -> np.ndarray:
    """One image as pixel_values [C, H, W] of `shape`: resized to the exported size, then
    rescaled and normalized as the model's processor does (ImageNet statistics without one)."""
    from PIL import Image

    _, channels, h, w = shape
    resized = np.asarray(Image.fromarray(img).convert("RGB").resize((w, h), Image.BICUBIC))
    if processor is not None:
        try:
            out = processor(images=resized, do_resize=False, do_center_crop=False,
                            do_pad=False, return_tensors="np")["pixel_values"][0]
            if list(out.shape) == [channels, h, w]:
                return out.astype(np.float32)
        except (TypeError, ValueError, KeyError):
            pass
    x = resized.astype(np.float32) / 255.0
    x = (x - np.array(IMAGENET_MEAN, np.float32)) / np.array(IMAGENET_STD, np.float32)
    return x.transpose(2, 0, 1)[:channels].astype(np.float32)


class Speaker:
    """eSpeak NG, loaded once per process, speaking into memory (no audio device)."""

    def __init__(self) -> None:
        import espeakng_loader

        self.lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self.chunks: list[np.ndarray] = []
        callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                    ctypes.c_void_p)
        self._callback = callback(self._collect)  # kept alive while the library holds it
        self.lib.espeak_Initialize.restype = ctypes.c_int
        self.lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint,
                                          ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
                                          ctypes.c_void_p, ctypes.c_void_p]
        synchronous = 2  # AUDIO_OUTPUT_SYNCHRONOUS: samples come back through the callback
        self.rate = self.lib.espeak_Initialize(synchronous, 0,
                                               espeakng_loader.get_data_path().encode(), 0)
        if self.rate <= 0:
            raise RuntimeError("eSpeak NG did not initialize")
        self.lib.espeak_SetSynthCallback(self._callback)
        self.lib.espeak_SetVoiceByName(b"en")
        self.spoken: dict[str, np.ndarray] = {}

    def _collect(self, wav: Any, count: int, _events: Any) -> int:
        if count > 0:
            self.chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0

    def say(self, text: str) -> np.ndarray:
        """`text` spoken, as float32 samples in [-1, 1] at 16 kHz; the same text always the
        same samples in a process (see `speaker`)."""
        if text not in self.spoken:
            self.spoken[text] = self._speak(text)
        return self.spoken[text].copy()

    def _speak(self, text: str) -> np.ndarray:
        self.chunks = []
        data = text.encode()
        self.lib.espeak_Synth(data, len(data) + 1, 0, 1, 0, 0, None, None)
        self.lib.espeak_Synchronize()
        return resampled(np.concatenate(self.chunks).astype(np.float32) / 32768.0, self.rate,
                         RATE)


def resampled(wav: np.ndarray, rate: int, to: int) -> np.ndarray:
    """`wav` at `rate` Hz as float32 at `to` Hz (polyphase, exact for integer rates)."""
    if rate == to:
        return wav.astype(np.float32)
    from scipy.signal import resample_poly

    divisor = np.gcd(to, rate)
    return resample_poly(wav, to // divisor, rate // divisor).astype(np.float32)


@cache
def speaker() -> Speaker:
    """The process's speaker, with every shipped sentence already spoken, in file order.
    eSpeak NG carries state from one utterance to the next (the same sentence spoken again
    comes out some samples longer and different), so what a sentence sounds like would depend
    on what the process said before: calibration data, and so the quantized graph under one
    store key, would change with the order a warm worker ran steps in. Spoken once from the
    library's initial state and kept, each sentence is the same in every process."""
    spk = Speaker()
    for line in SENTENCES.read_text().splitlines():
        if line.strip():
            spk.say(line.strip())
    return spk


def feature_extractor(checkpoint: Path | None) -> Any:
    if checkpoint is None or not (checkpoint / "preprocessor_config.json").is_file():
        return None
    from transformers import AutoFeatureExtractor

    try:
        return AutoFeatureExtractor.from_pretrained(str(checkpoint), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError):
        return None


def waveform(text: str, samples: int, extractor: Any) -> np.ndarray:
    """`text` spoken, as the waveform a graph takes (fitted_waveform)."""
    return fitted_waveform(speaker().say(text), samples, extractor, RATE)


def fitted_waveform(wav: np.ndarray, samples: int, extractor: Any, rate: int) -> np.ndarray:
    """Speech at `rate` Hz fitted to `samples` (cut, or padded with silence), and normalized
    as the model's feature extractor does."""
    wav = np.pad(wav[:samples], (0, max(0, samples - len(wav))))
    if extractor is not None:
        out = extractor(wav, sampling_rate=rate, return_tensors="np")
        return np.asarray(out["input_values"][0], np.float32)[:samples]
    return ((wav - wav.mean()) / (wav.std() + 1e-7)).astype(np.float32)


def extracted(wav: np.ndarray, extractor: Any, rate: int, field: str) -> np.ndarray:
    """The feature extractor's `field` (input_features: log-mel [mel bins, frames];
    input_values: a spectrogram's [frames, mel bins]) for speech at `rate` Hz."""
    return np.asarray(extractor(wav, sampling_rate=rate, return_tensors="np")[field][0],
                      np.float32)


def mel_features(text: str, shape: list[int], extractor: Any) -> np.ndarray:
    """`text` spoken, as the [mel bins, frames] log-mel features a Whisper-like encoder takes
    (its feature extractor pads or cuts the speech to its window)."""
    _, mels, frames = shape
    if extractor is None:
        raise LookupError("the checkpoint has no feature extractor to compute log-mel features")
    out = extracted(speaker().say(text), extractor, RATE, "input_features")
    if out.shape != (mels, frames):
        raise LookupError(f"the feature extractor gives {list(out.shape)} features, the graph "
                          f"takes [{mels}, {frames}]")
    return out


def spectrogram(text: str, shape: list[int], extractor: Any,
                field: str = "input_values") -> np.ndarray:
    """`text` spoken, as the [frames, mel bins] features a spectrogram or filter-bank model
    takes under `field` (its feature extractor computes them, cut or padded with silence's
    zeros to the graph's frames; without one there are none to compute)."""
    _, frames, mels = shape
    if extractor is None:
        raise LookupError("the checkpoint has no feature extractor to compute spectrograms")
    return fitted_frames(extracted(speaker().say(text), extractor, RATE, field), frames, mels)


def fitted_frames(out: np.ndarray, frames: int, mels: int) -> np.ndarray:
    """Features [frames, mel bins] cut or padded with zeros to `frames`."""
    if out.ndim != 2 or out.shape[1] != mels:
        raise LookupError(f"the feature extractor gives {list(out.shape)} features, the graph "
                          f"takes [{frames}, {mels}]")
    return np.pad(out[:frames], ((0, max(0, frames - len(out))), (0, 0)))
