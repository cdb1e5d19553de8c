"""`eval` of speech recognition (CTC) and sequence-to-sequence generation (text2text,
image-to-text) on tiny models: PyTorch, the fp32 export on CPU and the deliverable, on the
shipped inputs (agreement with PyTorch) and on small labelled datasets the tests write (JSON
Lines with audio and image file paths, an audio folder with metadata.jsonl); the fp32 export
must decode exactly what PyTorch decodes. Speech and text2text also run on QNN HTP
(w8a16 per-channel), within a drop of 0.05 of PyTorch's transcripts and texts.

Random tiny models have no tokenizer: wav2vec2 and the vision-encoder-decoder are compared as
token ids (the record says so); the BART checkpoint is saved with MiniLM's WordPiece tokenizer
([CLS] starts decoding, [SEP] ends it) and untied output weights (tied random weights only
repeat the start token), and wav2vec2 gets a character CTC tokenizer for the labelled runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from filelock import FileLock

from tests.checkpoints import text_checkpoint
from tests.conftest import shared_dir
from tests.integration.conftest import run_json, step

SPEECH = ("model=tiny_random", "model.random_init.model_type=wav2vec2",
          "model.task=automatic-speech-recognition", "export.shapes.audio_samples=8000")
TEXT2TEXT = ("model=local_hf", "model.task=text2text-generation",
             "export.shapes.sequence_length=16", "export.shapes.decoder_sequence_length=8")
IMAGE2TEXT = ("model=tiny_random", "model.random_init.model_type=vision-encoder-decoder",
              "model.task=image-to-text", "export.shapes.decoder_sequence_length=8",
              # wider random weights: captions that depend on the image
              "+model.random_init.config.encoder.initializer_range=0.2",
              "+model.random_init.config.decoder.initializer_range=0.2")
CPU = ("quant=none", "target=cpu")
HTP = ("target=qnn_htp", "quant=w8a16_pc", "quant.calibration.samples=8",
       "eval.max_drop=0.05")
# for HTP, a shallower wav2vec2 at a realistic weight range: two feature convolutions (still 25
# frames a clip) and one layer. A random model's frames are near ties between tokens; each 8-bit
# layer adds noise, and the default seven convolutions and two layers at 0.02 flip ~10% of the
# tokens (0.06 at range 0.2), this one none
SHALLOW = ("+model.random_init.config.initializer_range=0.2",
           "+model.random_init.config.num_feat_extract_layers=2",
           "+model.random_init.config.conv_dim=[16,16]",
           "+model.random_init.config.conv_kernel=[10,8]",
           "+model.random_init.config.conv_stride=[5,64]",
           "+model.random_init.config.num_hidden_layers=1")
CHARS = ["<pad>", "<s>", "</s>", "<unk>", "|", *"abcdefghijklmnopqrstuvwxyz'"]
MODELS = ("pytorch", "fp32_onnx", "target")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store and checkpoint folder for every test here, whichever xdist worker runs it."""
    root = shared_dir(tmp_path_factory) / "eval-generation"
    (root / "store").mkdir(parents=True, exist_ok=True)
    return root


def evaluate(shared: Path, out: Path, *args: str) -> dict[str, Any]:
    """`modelplan run ARGS eval=task` on 4 samples: the eval step's metrics."""
    code, record, err = run_json(*args, "verify=none", "perf=none", "eval=task",
                                 "eval.dataset.samples=4", store=shared / "store", outputs=out)
    assert code == 0, err
    metrics = step(record, "eval")["metrics"]
    assert set(metrics["scores"]) == set(MODELS)
    return metrics


def agrees(metrics: dict[str, Any], *, labelled: bool) -> None:
    """Every model scored; the fp32 export scores exactly what PyTorch scores."""
    assert metrics["labelled"] is labelled
    scores = metrics["scores"]
    assert scores["fp32_onnx"] == scores["pytorch"]
    assert metrics["eval_fp32_drop"] == 0
    for which in MODELS:
        assert set(scores[which]) == set(scores["pytorch"]) and scores[which]


def bart_checkpoint(shared: Path) -> Path:
    """A tiny BART with MiniLM's tokenizer: decoding starts at [CLS], ends at [SEP]."""
    return text_checkpoint(  # locked there: xdist workers share it
        shared / "bart", cls="BartForConditionalGeneration", model_type="bart", d_model=64,
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, pad_token_id=0,
        bos_token_id=101, eos_token_id=102, decoder_start_token_id=101,
        forced_eos_token_id=None, tie_word_embeddings=False, init_std=0.1)


def bart_htp_checkpoint(shared: Path) -> Path:
    """`bart_checkpoint` with one encoder and one decoder layer: for HTP, where each 8-bit layer
    adds noise that flips the random model's near ties (with two of each, two of the four
    sentences decode otherwise after a few tokens; with one, none)."""
    return text_checkpoint(
        shared / "bart-1-layer", cls="BartForConditionalGeneration", model_type="bart",
        d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, pad_token_id=0,
        bos_token_id=101, eos_token_id=102, decoder_start_token_id=101,
        forced_eos_token_id=None, tie_word_embeddings=False, init_std=0.1)


def greedy_texts(checkpoint: Path, lines: list[str]) -> list[str]:
    """transformers' own greedy decoding of each line, up to the decoder's 8 positions."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    model = transformers.BartForConditionalGeneration.from_pretrained(str(checkpoint)).eval()
    out = []
    for line in lines:
        with torch.inference_mode():
            enc = tok(line, return_tensors="pt", truncation=True, max_length=16)
            ids = model.generate(input_ids=enc["input_ids"],
                                 attention_mask=enc["attention_mask"], do_sample=False,
                                 num_beams=1, max_length=8)
        out.append(tok.decode(ids[0], skip_special_tokens=True))
    return out


def ctc_checkpoint(shared: Path) -> Path:
    """A tiny random wav2vec2 CTC model with a character tokenizer and feature extractor."""
    dest = shared / "wav2vec2-ctc"
    with FileLock(f"{dest}.lock"):
        if not (dest / "config.json").is_file():
            _save_ctc(dest)
    return dest


def _save_ctc(dest: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        conv_dim=[16] * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
        vocab_size=len(CHARS), pad_token_id=0)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    transformers.Wav2Vec2ForCTC(config).eval().save_pretrained(str(tmp))
    (tmp / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(CHARS)}))
    transformers.Wav2Vec2CTCTokenizer(str(tmp / "vocab.json")).save_pretrained(str(tmp))
    transformers.Wav2Vec2FeatureExtractor(sampling_rate=16000).save_pretrained(str(tmp))
    tmp.rename(dest)


def sentences(n: int) -> list[str]:
    from executors.samples import text

    return text.sentences("verify")[:n]


def speech_files(folder: Path) -> list[dict[str, str]]:
    """The shipped speaker saying four sentences, as WAV files: [{file, transcript}]."""
    import soundfile

    from executors.samples import media

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, line in enumerate(sentences(4)):
        path = folder / f"clip{i}.wav"
        soundfile.write(str(path), media.speaker().say(line), media.RATE)
        rows.append({"file": str(path), "transcript": line})
    return rows


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_speech_on_shipped_speech_agrees_with_pytorch(shared: Path, tmp_path: Path) -> None:
    metrics = evaluate(shared, tmp_path, *SPEECH, *CPU)
    agrees(metrics, labelled=False)
    assert metrics["metric"] == "wer" and not metrics["higher_is_better"]
    assert metrics["scores"]["fp32_onnx"] == {"wer": 0.0, "cer": 0.0}
    assert metrics["eval_verdict"] == "PASS"
    assert "space-separated token ids" in metrics["notes"][0]


def checkpoint_of(out: Path) -> Path:
    """The checkpoint `resolve` wrote for the run whose record is under `out`."""
    record = json.loads(next(out.rglob("run.json")).read_text())
    return Path(step(record, "resolve")["outputs"]["source.json"]).parent / "checkpoint"


def ctc_ids(checkpoint: Path, clips: list[np.ndarray]) -> list[tuple[int, ...]]:
    """transformers' own CTC reading of each clip: frames' best tokens, repeats merged, blanks
    (the pad token) dropped."""
    from itertools import groupby

    import torch
    import transformers

    model = transformers.Wav2Vec2ForCTC.from_pretrained(str(checkpoint)).eval()
    blank = model.config.pad_token_id or 0
    out = []
    for clip in clips:
        values = (clip - clip.mean()) / np.sqrt(clip.var() + 1e-7)  # the feature extractor's
        with torch.inference_mode():
            frames = model(torch.from_numpy(values[None].astype(np.float32))).logits[0]
        out.append(tuple(t for t, _ in groupby(frames.argmax(-1).tolist()) if t != blank))
    return out


@pytest.mark.slow  # ~40 s: the HTP simulator
def test_speech_on_htp(shared: Path, tmp_path: Path) -> None:
    """Within a drop users set (0.05 of WER against PyTorch's transcripts), on clips the model
    transcribes differently from one another."""
    from executors.samples import media

    metrics = evaluate(shared, tmp_path, *SPEECH, *SHALLOW, *HTP)
    agrees(metrics, labelled=False)
    assert metrics["ep"] == "qnn" and metrics["scores"]["fp32_onnx"]["wer"] == 0.0
    assert metrics["passed"] and metrics["eval_verdict"] == "PASS", metrics["verdict_line"]
    target = metrics["scores"]["target"]
    assert target["wer"] == pytest.approx(metrics["eval_drop"], abs=1e-6)
    assert target["wer"] <= 0.05 and target["cer"] <= 0.05
    said = [media.speaker().say(line)[:8000] for line in sentences(4)]
    transcripts = ctc_ids(checkpoint_of(tmp_path), said)
    assert len(set(transcripts)) == len(transcripts) and all(transcripts), transcripts


def test_speech_with_transcripts_from_jsonl_and_an_audio_folder(shared: Path,
                                                               tmp_path: Path) -> None:
    """WAV paths in JSON Lines, and an audio folder with metadata.jsonl (read with soundfile:
    the `datasets` Audio feature needs torchcodec): the same rows score the same."""
    ckpt = ctc_checkpoint(shared)
    files = speech_files(tmp_path / "clips")
    listed = jsonl(tmp_path / "speech.jsonl",
                   [{"audio": f["file"], "transcript": f["transcript"]} for f in files])
    jsonl(tmp_path / "clips" / "metadata.jsonl",
          [{"file_name": Path(f["file"]).name, "transcript": f["transcript"]} for f in files])
    runs = {}
    for name, where in (("jsonl", listed), ("folder", tmp_path / "clips")):
        runs[name] = evaluate(shared, tmp_path / name, "model=local_hf", f"model.path={ckpt}",
                              *SPEECH[2:], *CPU, f"eval.dataset.path={where}")
        agrees(runs[name], labelled=True)
        assert "labels from transcript" in runs[name]["data"] and "notes" not in runs[name]
        assert runs[name]["scores"]["pytorch"]["wer"] > 0  # random weights: no real words
    assert runs["jsonl"]["scores"] == runs["folder"]["scores"]


@pytest.mark.slow  # ~110 s: BART on the CPU and on the HTP simulator
def test_text2text_on_shipped_sentences_and_on_htp(shared: Path, tmp_path: Path) -> None:
    model = (*TEXT2TEXT, f"model.path={bart_checkpoint(shared)}")
    cpu = evaluate(shared, tmp_path / "cpu", *model, *CPU)
    agrees(cpu, labelled=False)
    assert cpu["metric"] == "bleu" and cpu["higher_is_better"]
    assert cpu["scores"]["fp32_onnx"] == {"bleu": 1.0, "cer": 0.0, "exact_match": 1.0}
    assert "notes" not in cpu  # decoded with the tokenizer
    shallow = bart_htp_checkpoint(shared)
    htp = evaluate(shared, tmp_path / "htp", *TEXT2TEXT, f"model.path={shallow}", *HTP)
    agrees(htp, labelled=False)
    assert htp["ep"] == "qnn"
    assert htp["passed"] and htp["eval_verdict"] == "PASS", htp["verdict_line"]
    assert htp["eval_drop"] == pytest.approx(1.0 - htp["scores"]["target"]["bleu"], abs=1e-6)
    assert htp["eval_drop"] <= 0.05 and htp["scores"]["target"]["cer"] <= 0.05
    texts = greedy_texts(shallow, sentences(4))  # what it decodes differs with the sentence
    assert len(set(texts)) >= 3 and all(texts), texts


def test_text2text_against_targets(shared: Path, tmp_path: Path) -> None:
    lines = sentences(4)
    data = jsonl(tmp_path / "pairs.jsonl",
                 [{"text": a, "target": b} for a, b in zip(lines, lines[1:] + lines[:1],
                                                          strict=True)])
    metrics = evaluate(shared, tmp_path, *TEXT2TEXT, f"model.path={bart_checkpoint(shared)}",
                       *CPU, f"eval.dataset.path={data}")
    agrees(metrics, labelled=True)
    assert "labels from target" in metrics["data"]
    assert metrics["scores"]["pytorch"]["exact_match"] == 0.0  # random weights


def test_image_to_text_on_photographs_and_against_captions(shared: Path,
                                                           tmp_path: Path) -> None:
    from PIL import Image

    from executors.samples import media

    shipped = evaluate(shared, tmp_path / "shipped", *IMAGE2TEXT, *CPU)
    agrees(shipped, labelled=False)
    assert shipped["scores"]["pytorch"] == {"bleu": 1.0, "cer": 0.0, "exact_match": 1.0}
    assert "space-separated token ids" in shipped["notes"][0]
    rows = []
    for i, (photo, line) in enumerate(zip(media.views("verify"), sentences(4), strict=False)):
        Image.fromarray(np.asarray(photo)).save(tmp_path / f"photo{i}.png")
        rows.append({"image": str(tmp_path / f"photo{i}.png"), "caption": line})
    captions = jsonl(tmp_path / "captions.jsonl", rows)
    labelled = evaluate(shared, tmp_path / "labelled", *IMAGE2TEXT, *CPU,
                        f"eval.dataset.path={captions}")
    agrees(labelled, labelled=True)
    assert "target=caption" in labelled["data"] and labelled["metric"] == "cer"
