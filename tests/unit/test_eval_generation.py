"""The pure parts of speech recognition and generation eval: CTC collapse, text normalization,
the error rates and BLEU, the greedy loop over a fixed-length decoder, and reading audio cells
and audio folders without torchcodec."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from executors.evaluation import data, textscore
from executors.evaluation.base import Context, EvalDataError
from executors.evaluation.generation import Generation
from executors.evaluation.speech import Speech, ctc_collapse, transcript
from executors.generation.encoder_decoder import Decoding, GenerationError, decoding, generate
from planner.models.evaluation import EVAL

CHARS = ["<pad>", "<s>", "</s>", "<unk>", "|", *"abcdefghijklmnopqrstuvwxyz'"]


def ctc_tokenizer(folder: Path) -> Any:
    from transformers import Wav2Vec2CTCTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(CHARS)}))
    return Wav2Vec2CTCTokenizer(str(folder / "vocab.json"))


def ids(text: str) -> list[int]:
    return [CHARS.index("|" if c == " " else c) for c in text]


def test_ctc_collapse_merges_runs_and_drops_blanks() -> None:
    assert ctc_collapse([0, 5, 5, 0, 5, 3, 3, 0, 0], blank=0) == [5, 5, 3]
    assert ctc_collapse([], blank=0) == []
    assert ctc_collapse([7, 7, 7], blank=7) == []


def test_transcript_through_a_ctc_tokenizer_keeps_letters_a_blank_separates(
        tmp_path: Path) -> None:
    tok = ctc_tokenizer(tmp_path)
    h, e, l, o, bar = ids("h") + ids("e") + ids("l") + ids("o") + ids(" ")
    frames = [0, h, h, e, 0, l, l, 0, l, o, o, bar, bar, h, 0]
    cx = Context("automatic-speech-recognition", {}, {}, None, {"pad_token_id": 0})
    assert transcript(frames, cx, tok) == "hello h"
    assert transcript(frames, cx, None) == " ".join(map(str, [h, e, l, l, o, bar, h]))


def test_normalize_lowers_and_strips_punctuation() -> None:
    assert textscore.normalize("  Hello,   World!  It's  ") == "hello world its"
    assert textscore.normalize("¿Qué?  $5 — ok") == "qué 5 ok"
    assert textscore.normalize("12 7 3") == "12 7 3"


def test_error_rates_bleu_and_exact_match() -> None:
    refs = ["the cat sat on the mat", "a quick brown fox jumps"]
    assert textscore.error_rates(["The cat sat on the mat.", "a quick brown fox jumps"],
                                 refs) == {"wer": 0.0, "cer": 0.0}
    got = textscore.error_rates(["the dog sat on the mat", "a quick brown fox jumps"], refs)
    assert got["wer"] == pytest.approx(1 / 11) and 0 < got["cer"] < got["wer"]
    assert textscore.bleu(refs, refs) == 1.0
    assert textscore.bleu(["x y z w", "v u t s"], refs) == 0.0
    assert textscore.exact_match(["The cat sat on the mat!", "no"], refs) == 0.5


def test_references_name_the_column_when_a_cell_is_missing() -> None:
    assert textscore.references([{"target": "a"}, {"target": ["b", "c"]}], "target") == ["a", "b"]
    with pytest.raises(EvalDataError, match=r"^eval.dataset.columns.target: row 1 has no"):
        textscore.references([{"target": "a"}, {"target": None}], "target")
    with pytest.raises(EvalDataError, match="a column of strings"):
        textscore.references([{"transcript": 3}], "transcript")


def seq2seq_context(info: dict[str, Any], length: int = 4) -> Context:
    specs = {"encoder": [{"name": "input_ids", "shape": [1, 6], "kind": "token_ids"},
                         {"name": "attention_mask", "shape": [1, 6], "kind": "attention_mask"}],
             "decoder": [{"name": "input_ids", "shape": [1, length], "kind": "decoder_ids"},
                         {"name": "encoder_hidden_states", "shape": [1, 6, 8],
                          "kind": "encoder_hidden_states"},
                         {"name": "encoder_attention_mask", "shape": [1, 6],
                          "kind": "encoder_attention_mask"}]}
    return Context("text2text-generation", specs, {"decoder": ["logits"]}, None, info)


ENCODER = {"input_ids": np.zeros((1, 6), np.int64),
           "attention_mask": np.array([[1, 1, 1, 0, 0, 0]], np.int64)}


def counting_graphs(length: int, seen: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """An encoder of 9 states and a causal fake decoder whose logits at position i pick token
    ids[i] + 1; each decoder feed is kept."""
    def decoder(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert feed["input_ids"].shape == (1, length) and feed["input_ids"].dtype == np.int64
        seen.append(feed)
        out = np.zeros((1, length, 50), np.float32)
        for i, token in enumerate(feed["input_ids"][0].tolist()):
            out[0, i, (token + 1) % 50] = 1.0
        return {"logits": out}
    return {"encoder": lambda feed: {"last_hidden_state": np.ones((1, 9, 8), np.float32)},
            "decoder": decoder}


def test_greedy_stops_at_eos_and_pads_after_the_prefix() -> None:
    seen: list[dict[str, np.ndarray]] = []
    got = generate(counting_graphs(6, seen), ENCODER, seq2seq_context({}, 6),
                   Decoding(start=5, eos=8, pad=0, length=6))
    assert got.without_end() == [6, 7] and got.tokens == [6, 7, 8] and got.stopped == "eos"
    assert [f["input_ids"][0].tolist() for f in seen] == \
        [[5, 0, 0, 0, 0, 0], [5, 6, 0, 0, 0, 0], [5, 6, 7, 0, 0, 0]]


def test_greedy_without_eos_runs_to_the_graph_length() -> None:
    seen: list[dict[str, np.ndarray]] = []
    got = generate(counting_graphs(4, seen), ENCODER, seq2seq_context({}, 4),
                   Decoding(start=10, eos=None, pad=1, length=4))
    assert got.tokens == [11, 12, 13, 14] and got.stopped == "context"  # the last one read at
    assert seen[-1]["input_ids"][0].tolist() == [10, 11, 12, 13] and len(seen) == 4  # the end


def test_greedy_follows_a_given_run_and_its_length_caps_it() -> None:
    seen: list[dict[str, np.ndarray]] = []
    got = generate(counting_graphs(6, seen), ENCODER, seq2seq_context({}, 6),
                   Decoding(start=5, eos=None, pad=0, length=6, follow=(9, 3)))
    assert got.tokens == [6, 10]               # its own argmax after each followed token
    assert [f["input_ids"][0].tolist()[:3] for f in seen] == [[5, 0, 0], [5, 9, 0]]


def test_decoding_reads_the_config_and_its_decoder_config() -> None:
    cx = seq2seq_context({"decoder_start_token_id": 2, "eos_token_id": [2, 3],
                          "pad_token_id": 1})
    assert decoding(cx) == Decoding(start=2, eos=2, pad=1, length=4)
    nested = seq2seq_context({"decoder_start_token_id": 101, "decoder": {"pad_token_id": 0}})
    assert decoding(nested) == Decoding(start=101, eos=None, pad=0, length=4)
    with pytest.raises(GenerationError, match="decoder_start_token_id"):
        decoding(seq2seq_context({"pad_token_id": 0}))


def test_decoder_feed_cuts_the_states_and_passes_the_encoder_mask() -> None:
    seen: list[dict[str, np.ndarray]] = []
    generate(counting_graphs(4, seen), ENCODER, seq2seq_context({}),
             Decoding(start=1, eos=None, pad=0, length=4, most=1))
    feed = seen[0]
    assert feed["encoder_hidden_states"].shape == (1, 6, 8)
    assert feed["encoder_attention_mask"] is ENCODER["attention_mask"]
    assert feed["input_ids"].shape == (1, 4)


@pytest.mark.parametrize("task", ["automatic-speech-recognition", "text2text-generation",
                                  "image-to-text"])
def test_score_reports_exactly_the_declared_metrics(task: str) -> None:
    family = Speech() if task == "automatic-speech-recognition" else Generation()
    assert task in family.tasks
    cx = Context(task, {}, {}, None)
    got = family.score(["a b c d e", "f g"], ["a b c d e", "f h"], cx)
    assert set(got) == set(EVAL[task].metrics)
    assert set(EVAL[task].lower_is_better) <= {"wer", "cer"}


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, samples, rate, format="WAV")
    return buf.getvalue()


def test_audio_array_reads_bytes_and_path_cells(tmp_path: Path) -> None:
    wave = np.sin(np.arange(800) / 5).astype(np.float32) * 0.5
    raw = wav_bytes(wave, 8000)
    (tmp_path / "a.wav").write_bytes(raw)
    from_bytes = data.audio_array({"bytes": raw, "path": "a.wav"}, 16000)
    from_path = data.audio_array({"bytes": None, "path": str(tmp_path / "a.wav")}, 16000)
    assert from_bytes.shape == (1600,) and np.array_equal(from_bytes, from_path)
    assert np.allclose(data.audio_array(str(tmp_path / "a.wav"), 8000), wave, atol=1e-4)


def test_an_audio_folder_is_read_without_torchcodec(tmp_path: Path) -> None:
    wave = np.zeros(160, np.float32)
    (tmp_path / "clips").mkdir()
    for name in ("b.wav", "a.wav"):
        (tmp_path / "clips" / name).write_bytes(wav_bytes(wave, 16000))
    (tmp_path / "metadata.jsonl").write_text(
        json.dumps({"file_name": "clips/a.wav", "transcript": "one"}) + "\n" +
        json.dumps({"file_name": "clips/b.wav", "transcript": "two"}) + "\n")
    table = data._audio_folder(tmp_path)
    assert table.column_names == ["audio", "transcript"]
    assert [Path(r["audio"]).name for r in table] == ["a.wav", "b.wav"]
    (tmp_path / "metadata.jsonl").unlink()
    (tmp_path / "clips" / "c.flac").write_bytes(b"")
    table = data._audio_folder(tmp_path)
    assert table.column_names == ["audio", "label"] and table[0]["label"] == "clips"
    assert len(table) == 3


def test_audio_folder_metadata_needs_file_names(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(wav_bytes(np.zeros(160, np.float32), 16000))
    (tmp_path / "metadata.jsonl").write_text(json.dumps({"path": "a.wav"}) + "\n")
    with pytest.raises(ValueError, match="metadata.jsonl has rows without a file_name"):
        data._audio_folder(tmp_path)


def test_saved_audio_datasets_and_audio_folders_load_as_rows(tmp_path: Path) -> None:
    """A save_to_disk dataset with an Audio column (decoding it needs torchcodec) and an audio
    folder both give rows whose audio cells audio_array reads."""
    import datasets

    wave = (np.sin(np.arange(1600) / 7) * 0.3).astype(np.float32)
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "a.wav").write_bytes(wav_bytes(wave, 16000))
    (tmp_path / "clips" / "metadata.csv").write_text("file_name,transcript\na.wav,hello\n")
    table = datasets.Dataset.from_dict({"audio": [str(tmp_path / "clips" / "a.wav")],
                                        "transcript": ["hello"]})
    table.cast_column("audio", datasets.Audio()).save_to_disk(str(tmp_path / "saved"))
    params = {"task": "automatic-speech-recognition", "dataset_name": None, "split": None,
              "shuffle": False, "seed": 0, "samples": 4, "columns": {}}
    for kind, where in (("saved", tmp_path / "saved"), ("folder", tmp_path / "clips")):
        rows = data.load({**params, "dataset_kind": kind, "dataset": str(where)}, "audio")
        assert rows.labelled and [r["transcript"] for r in rows.rows] == ["hello"]
        assert np.allclose(data.audio_array(rows.rows[0]["audio"], 16000), wave, atol=1e-4)
