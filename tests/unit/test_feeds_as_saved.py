"""A language model's samples (calibration, verify, the export's check) come from PyTorch's run
of the checkpoint (executors/samples/generation.py): a bf16 checkpoint runs as saved, with no
fp32 copy of its weights, and gives the fp32 graphs the caches an fp32 run gives, to bf16's
precision; where a bf16 run fails, the fp32 run gives the feeds, as if bf16 were never tried."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from executors.onnx.artifacts import SOURCE
from executors.runtime import torchmodel
from executors.samples import Samples
from tests.checkpoints import text_checkpoint

SLOTS = 16


def _source(tmp: Path, dtype: str) -> Path:
    ckpt = text_checkpoint(tmp / f"llama-{dtype}", cls="LlamaForCausalLM", model_type="llama",
                           dtype=dtype, num_key_value_heads=1, pad_token_id=0)
    source = tmp / f"source-{dtype}"
    source.mkdir()
    (source / SOURCE).write_text(json.dumps({
        "checkpoint": str(ckpt), "task": "text-generation", "model_class": "LlamaForCausalLM"}))
    return source


def _decode_specs(vocab: int) -> list[dict[str, Any]]:
    """The decode graph's inputs as the plan declares them (head width 32, one KV head)."""
    past = [{"name": f"past_key_values.{i}.{part}", "dtype": "float32", "kind": "lm_past",
             "shape": [1, 1, SLOTS, 32], "min": -8.0, "max": 8.0}
            for i in range(2) for part in ("key", "value")]
    return [{"name": "input_ids", "dtype": "int64", "shape": [1, 1], "kind": "lm_step_ids",
             "min": 0, "max": vocab - 1},
            {"name": "position_ids", "dtype": "int64", "shape": [1, 1], "min": 0,
             "max": SLOTS, "kind": "lm_step_positions"},
            {"name": "attention_mask", "dtype": "int64", "shape": [1, SLOTS + 1], "min": 0,
             "max": 1, "kind": "lm_step_mask"}, *past]


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The dtypes the samples load the checkpoint in, in order."""
    real, seen = torchmodel.load, []

    def load(source: Path, dtype: str = "float32") -> Any:
        seen.append(dtype)
        return real(source, dtype)

    monkeypatch.setattr(torchmodel, "load", load)
    return seen


def _feeds(source: Path) -> list[dict[str, np.ndarray]]:
    vocab = json.loads((Path(json.loads((source / SOURCE).read_text())["checkpoint"])
                        / "config.json").read_text())["vocab_size"]
    return Samples(_decode_specs(vocab), "calibration", source=source).feeds(4)


def _widened(tmp: Path, source: Path) -> Path:
    """The source of an fp32 copy of `source`'s checkpoint: the same weights, saved as fp32."""
    import shutil

    import torch

    info = json.loads((source / SOURCE).read_text())
    wide = tmp / "llama-wide"
    shutil.copytree(info["checkpoint"], wide)
    for blob in wide.glob("*.safetensors"):
        blob.unlink()
    model = torchmodel.load(source)[0].to(torch.float32)
    model.config.dtype = "float32"
    model.save_pretrained(str(wide))
    out = tmp / "source-wide"
    out.mkdir()
    (out / SOURCE).write_text(json.dumps({**info, "checkpoint": str(wide)}))
    return out


def test_a_bf16_checkpoint_gives_its_feeds_as_saved(tmp_path: Path, loads: list[str]) -> None:
    source = _source(tmp_path, "bfloat16")
    narrow = _feeds(source)
    assert loads == ["bfloat16"]  # never as fp32
    wide_source = _widened(tmp_path, source)
    loads.clear()
    wide = _feeds(wide_source)
    assert loads == ["float32"]
    # the same weights run in fp32: the same positions and masks; the first sample's caches
    # (the prompt's alone: no greedy choice, whose near-ties bf16 may break otherwise, went
    # into them) the same to bf16's precision, as the fp32 graphs read them
    for got, want in zip(narrow, wide, strict=True):
        for name in ("position_ids", "attention_mask"):
            assert np.array_equal(got[name], want[name]), name
    for name in (n for n in narrow[0] if n.startswith("past_key_values")):
        a, b = narrow[0][name].ravel(), wide[0][name].ravel()
        assert np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.999, name
        assert not np.array_equal(a, b)  # computed in bf16 indeed


@pytest.mark.parametrize("fails_in", ["prompt", "step"])
def test_a_bf16_run_that_fails_gives_the_fp32_runs_feeds(
        tmp_path: Path, loads: list[str], monkeypatch: pytest.MonkeyPatch, fails_in: str) -> None:
    """A bf16 kernel missing in the prompt's forward, or only in the one-token one (where
    TorchLM says the model cannot continue): the feeds are the fp32 run's, random prompt ids
    (a checkpoint without a tokenizer) drawn again from where they were."""
    import torch

    from executors.samples import generation

    source = _source(tmp_path, "bfloat16")
    monkeypatch.setattr(generation, "tokenizer", lambda _ckpt: None)
    real = torch.nn.Module.__call__

    def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids")
        if ids is not None and next(module.parameters()).dtype == torch.bfloat16 and \
                (ids.shape[-1] == 1) == (fails_in == "step"):
            raise RuntimeError('"addmm_impl_cpu_" not implemented for \'BFloat16\'')
        return real(module, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "__call__", call)
    fallen = _feeds(source)
    assert loads == ["bfloat16", "float32"]
    monkeypatch.setattr(torchmodel, "saved_narrow", lambda _source: None)
    direct = _feeds(source)  # the same fp32 run, bf16 never tried: the same feeds
    assert len({f["input_ids"].item() for f in direct}) > 1  # random ids, not one token
    for got, want in zip(fallen, direct, strict=True):
        assert all(np.array_equal(got[k], want[k]) for k in want)


def test_an_fp16_or_fp32_checkpoint_runs_as_fp32(tmp_path: Path, loads: list[str]) -> None:
    for dtype in ("float16", "float32"):
        feeds = _feeds(_source(tmp_path, dtype))
        assert all(v.dtype == np.float32 for k, v in feeds[0].items() if k.startswith("past"))
    assert loads == ["float32", "float32"]
