"""The cached decoder of encoder-decoder models (export.shapes.decoder_cache=true): an encoder,
a cross graph (the cross-attention keys and values, once per input) and a one-token decoder
over a static self-attention cache. On the CPU in fp32 it generates exactly what the uncached
decoder (the whole prefix each step) generates, and what transformers' own `generate` does,
for BART, Marian, T5 (relative position bias), Whisper, BLIP (a captioner's text decoder) and
a vision encoder-decoder (a BERT decoder reading ViT)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from executors.evaluation import inputs, runner
from executors.generation import encoder_decoder
from executors.samples import media
from tests.integration.conftest import run_json, step


def build(tmp: Path, family: str, *args: str) -> dict[str, Any]:
    code, record, err = run_json("model=tiny_random", f"model.random_init.model_type={family}",
                                 "perf=none", *args, store=tmp / "store", outputs=tmp / "out")
    assert code == 0, err
    return record


def transcripts(record: dict[str, Any], rows: list[dict[str, Any]],
                task: str) -> list[list[int]]:
    """Greedy decoding of each row through the build's published graphs (ONNX Runtime)."""
    folder = Path(step(record, "bundle")["outputs"]["bundle.json"]).parent
    files = runner.graph_files(folder)
    source = Path(step(record, "resolve")["outputs"]["source.json"]).parent
    cx = runner.context(task, source, files)
    sessions = {g: ort.InferenceSession(str(p)) for g, p in files.items()}
    graphs = {g: (lambda feed, s=s: dict(zip([o.name for o in s.get_outputs()],
                                             s.run(None, feed), strict=True)))
              for g, s in sessions.items()}
    # random weights may choose the end token at once: compare whole sequences instead
    how = dataclasses.replace(encoder_decoder.decoding(cx), eos=None)
    return [encoder_decoder.generate(graphs, feed(cx, row), cx, how).tokens for row in rows]


def feed(cx: Any, row: dict[str, Any]) -> dict[str, np.ndarray]:
    """A row's encoder feed: speech through the feature extractor, a photograph through the
    image processor; text as the given token ids, padded and masked (tiny random text models
    have no tokenizer)."""
    if "audio" in row or "image" in row:
        return inputs.modality_feed(cx, row)
    length = cx.specs["encoder"][0]["shape"][1]
    ids = np.zeros((1, length), np.int64)
    ids[0, :len(row["ids"])] = row["ids"]
    return {"input_ids": ids,
            "attention_mask": (np.arange(length) < len(row["ids"])).astype(np.int64)[None]}


FAMILIES = {"bart": "text2text-generation", "marian": "text2text-generation",
            "t5": "text2text-generation", "whisper": "automatic-speech-recognition",
            "blip": "image-to-text", "vision-encoder-decoder": "image-to-text"}


def rows_for(task: str) -> list[dict[str, Any]]:
    if task == "automatic-speech-recognition":
        return [{"audio": {"array": media.speaker().say(t), "sampling_rate": media.RATE}}
                for t in ("the cat sat on the mat", "a quick test")]
    if task == "image-to-text":
        return [{"image": img} for img in media.views("verify")[:2]]
    return [{"ids": [5, 17, 300, 42, 2]}, {"ids": [9, 8, 7, 600, 500, 400, 2]}]


def transformers_generate(record: dict[str, Any], rows: list[dict[str, Any]], task: str,
                          length: int) -> list[list[int]]:
    """transformers' own greedy `generate` on the checkpoint, on each row's encoder feed."""
    import torch
    from transformers import GenerationConfig

    from executors.generation import modules
    from executors.runtime import torchmodel

    source = Path(step(record, "resolve")["outputs"]["source.json"]).parent
    folder = Path(step(record, "bundle")["outputs"]["bundle.json"]).parent
    cx = runner.context(task, source, runner.graph_files(folder))
    model, _ = torchmodel.load(source)
    # one token more than compared: a forced end token (Marian's) lands after them; greedy,
    # with the tokens the checkpoint's generation config suppresses (no other processors)
    own = model.generation_config
    plain = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=length + 1,
                             decoder_start_token_id=modules.start(model),
                             pad_token_id=encoder_decoder.decoding(cx).pad,
                             suppress_tokens=own.suppress_tokens,
                             begin_suppress_tokens=own.begin_suppress_tokens,
                             bad_words_ids=own.bad_words_ids)
    out = []
    for row in rows:
        enc = {k: torch.from_numpy(v) for k, v in feed(cx, row).items()}
        with torch.no_grad():
            if task == "automatic-speech-recognition":
                # Whisper's own generate: its start and forced tokens as it sets them (it
                # returns the tokens after them), the tokens its config suppresses; greedy
                ids = model.generate(**enc, max_new_tokens=length + 1, do_sample=False,
                                     num_beams=1)[0].tolist()
                out.append(ids[:length])
                continue
            ids = model.generate(**enc, generation_config=plain)[0].tolist()
        out.append(ids[1:length + 1])  # after the start token (BLIP's text decoder: its bos)
    return out


SHAPES = ("export.shapes.sequence_length=16", "export.shapes.decoder_sequence_length=8")


def pair(tmp: Path, family: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A family's cached and uncached decoders, built for the CPU in fp32."""
    return tuple(build(tmp / name, family, "target=cpu", "quant=none", *SHAPES,
                       f"export.shapes.decoder_cache={cache}")
                 for name, cache in (("c", "true"), ("p", "false")))


@pytest.fixture(scope="module")
def whisper_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], ...]:
    """Whisper's pair, which the speech bundle's `generate` reads too."""
    return pair(tmp_path_factory.mktemp("whisper"), "whisper")


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "whisper"])
def test_cached_decoding_generates_what_the_uncached_decoder_does(tmp_path: Path,
                                                                  family: str) -> None:
    generates_alike(family, *pair(tmp_path, family))


def test_cached_whisper_decoding_generates_what_the_uncached_decoder_does(
        whisper_pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    generates_alike("whisper", *whisper_pair)


def generates_alike(family: str, cached: dict[str, Any], plain: dict[str, Any]) -> None:
    """The cached decoder generates the uncached decoder's tokens and transformers' own."""
    # Whisper's on the CPU is onnxruntime-genai's layout: the encoder gives the cross entries
    graphs = ("encoder", "decoder") if family == "whisper" else ("encoder", "cross", "decoder")
    assert {f"{g}.export" for g in graphs} == {s["id"] for s in cached["steps"]
                                               if s["id"].endswith(".export")}
    task = FAMILIES[family]
    rows = rows_for(task)
    got, want = transcripts(cached, rows, task), transcripts(plain, rows, task)
    # a free past runs to the decoder's positions, the uncached decoder to its 8 tokens
    assert [g[:len(w)] for g, w in zip(got, want, strict=True)] == want and all(want)
    theirs = transformers_generate(plain, rows, task, len(want[0]))  # to its end token
    assert all(theirs) and [g[:len(t)] for t, g in zip(theirs, got, strict=True)] == theirs
    for graph in graphs:
        assert step(cached, f"{graph}.verify")["metrics"]["cosine_mean"] > 0.9999
    for record in (cached, plain):  # both bundles generate PyTorch's tokens
        assert step(record, "verify_generation")["metrics"]["token_agreement"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("family", ["whisper", "t5", "blip", "vision-encoder-decoder"])
def test_cached_decoder_on_htp(tmp_path: Path, family: str) -> None:
    """Every graph compiled whole for HTP (T5's relative bias: a constant table the graph
    gathers a row of; its buckets' logarithm stays off the device)."""
    record = build(tmp_path, family, "target=qnn_htp", "quant=w8a16_pc", "verify.samples=2",
                   "export.shapes.sequence_length=16", "export.shapes.decoder_sequence_length=8",
                   "export.shapes.decoder_cache=true")
    for graph in ("encoder", "cross", "decoder"):
        assert step(record, f"{graph}.compile")["metrics"]["context_nodes"] >= 1
        assert step(record, f"{graph}.verify")["metrics"]["cosine_mean"] > 0.99
    assert np.isfinite(step(record, "decoder.verify")["metrics"]["cosine_min"])
    generated = step(record, "verify_generation")["metrics"]
    assert generated["token_agreement"] >= 0.75 and generated["cosine_mean"] > 0.99


def test_generate_transcribes_with_a_speech_bundle(
        tmp_path: Path, whisper_pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """`modelplan generate BUNDLE --audio FILE`: the bundle carries its feature extractor and
    the EP it was built for; the cached and the uncached bundles transcribe alike; bad input
    is one line."""
    import json

    import soundfile

    from tests.conftest import run_cli

    wav = tmp_path / "speech.wav"
    soundfile.write(wav, media.speaker().say("the cat sat on the mat"), media.RATE)
    said = []
    for record in whisper_pair:
        folder = Path(record["published"]["bundle.json"]).parent
        assert (folder / "preprocessor_config.json").is_file()
        assert json.loads((folder / "bundle.json").read_text())["runs_on"]["ep"] == "cpu"
        got = run_cli("generate", str(folder), "--audio", str(wav), "--new-tokens", "5",
                      "--json")
        assert got.returncode == 0, got.stderr
        said.append(json.loads(got.stdout)["tokens"])
    assert said[0] == said[1] and len(said[0]) == 5
    for bad in (["--audio", str(tmp_path / "missing.wav")], [], ["--new-tokens", "0",
                                                                 "--audio", str(wav)]):
        got = run_cli("generate", str(folder), *bad)
        assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
