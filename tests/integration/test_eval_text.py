"""`eval` of the text families on tiny BERTs with a real tokenizer: token classification, question
answering and fill-mask, on JSON Lines datasets written here and on the shipped inputs, for the
CPU (fp32) and QNN HTP (w8a16 per channel). Each labelled metric is also computed here from the
PyTorch model with transformers, by code that shares nothing with executors/evaluation but the
rule that picks the masked positions and SQuAD's normalization (both unit-tested)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from executors.evaluation.fillmask import mask_positions
from executors.evaluation.qa import normalize_answer
from planner.models.evaluation import EVAL
from tests.checkpoints import text_checkpoint
from tests.conftest import shared_dir
from tests.integration.conftest import run_json, step

SEQ = 32
TAGS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
CPU = ("target=cpu", "quant=none")
HTP = ("target=qnn_htp", "quant=w8a16_pc", "quant.calibration.samples=8")
NER = [
    (["John", "Smith", "lives", "in", "Paris", "."], [1, 2, 0, 0, 3, 0]),
    (["Mary", "flew", "to", "New", "York", "yesterday"], [1, 0, 0, 3, 4, 0]),
    (["The", "weather", "in", "Berlin", "is", "cold"], [0, 0, 0, 3, 0, 0]),
    (["Alice", "and", "Bob", "met", "in", "Lisbon"], [1, 0, 1, 0, 0, 3]),
    (["Zanzibar", "hosts", "Ngozi", "Okonjo-Iweala", "and", "Kowalczyk"], [3, 0, 1, 2, 0, 1]),
    # words of several sub-tokens: read at the first (this row's accuracy is not the last's)
    (["Wojciechowski", "visited", "Reykjavik", "and", "Ouagadougou", "with", "Thorvaldsdottir"],
     [1, 0, 3, 0, 3, 0, 1]),
    # longer than the graph: the words cut off are scored for no model
    ((["Rome", "is", "far", "from", "Oslo"] * 8), ([3, 0, 0, 0, 3] * 8)),
]
QA = [
    ("Where does John live?", "John Smith lives in Paris, the capital of France."),
    ("What did Mary buy at the market?", "Mary went to the market and bought three apples."),
    ("Who wrote the letter?", "The letter was written by an old sailor from Lisbon."),
    ("When does the train leave?", "The night train to Vienna leaves at nine o'clock."),
]
MLM = ["the quick brown fox jumps over the lazy dog near the river",
       "a small cat sleeps on the warm mat in the old house",
       "my brother drives a red car to work every morning",
       "she reads a long book about the history of music",
       "we walked along the beach and watched the sun go down"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = shared_dir(tmp_path_factory) / "eval-text-store"
    store.mkdir(exist_ok=True)
    return store


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("eval-text-ckpts")
    labels = {"id2label": TAGS, "label2id": {v: k for k, v in TAGS.items()}}
    return {"tokens": text_checkpoint(base / "tokens", "BertForTokenClassification", **labels),
            "qa": text_checkpoint(base / "qa", "BertForQuestionAnswering"),
            "mlm": text_checkpoint(base / "mlm", "BertForMaskedLM")}


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def evaluate(ckpt: Path, store: Path, out: Path, *args: str) -> dict[str, Any]:
    """The eval step's metrics of `modelplan run` on `ckpt`, checked for what holds for every
    text family: the declared metrics for the three models, each in [0, 1], the fp32 export
    computing what PyTorch computes, and a verdict that follows from the drop."""
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", "eval=task",
                                 f"export.shapes.sequence_length={SEQ}", "perf=none",
                                 "verify.samples=2", "eval.dataset.samples=8", *args,
                                 store=store, outputs=out)
    assert code == 0, err
    metrics = step(record, "eval")["metrics"]
    declared = set(EVAL[metrics["task"]].metrics)
    assert set(metrics["scores"]) == {"pytorch", "fp32_onnx", "target"}
    for scores in metrics["scores"].values():
        assert set(scores) == declared and all(0.0 <= v <= 1.0 for v in scores.values())
    for name in declared:
        assert metrics["scores"]["fp32_onnx"][name] == pytest.approx(
            metrics["scores"]["pytorch"][name], abs=1e-6)
    assert metrics["eval_pytorch"] == metrics["scores"]["pytorch"][metrics["metric"]]
    assert metrics["eval_target"] == metrics["scores"]["target"][metrics["metric"]]
    assert metrics["passed"] == (metrics["eval_drop"] <= metrics["max_drop"])
    assert metrics["eval_verdict"] == ("PASS" if metrics["passed"] else "REGRESSION")
    return metrics


def agrees(metrics: dict[str, Any]) -> None:
    """Without labels, PyTorch's predictions are the truth: PyTorch and the fp32 export agree
    fully with them."""
    assert not metrics["labelled"] and metrics["against"] == "PyTorch's predictions"
    for which in ("pytorch", "fp32_onnx"):
        assert set(metrics["scores"][which].values()) == {1.0}


# token classification

def ner_expected(ckpt: Path) -> dict[str, float]:
    """seqeval on the tags transformers' model gives each word's first sub-token."""
    import torch
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ckpt))
    model = AutoModelForTokenClassification.from_pretrained(str(ckpt)).eval()
    want, got = [], []
    for words, labels in NER:
        enc = tok(words, is_split_into_words=True, truncation=True, max_length=SEQ,
                  padding="max_length", return_tensors="pt")
        with torch.no_grad():
            tags = model(**enc).logits[0].argmax(-1).tolist()
        at: dict[int, int] = {}
        for pos, word in enumerate(enc.word_ids(0)):
            if word is not None:
                at.setdefault(word, pos)
        want.append([TAGS[labels[w]] for w in sorted(at)])
        got.append([TAGS[tags[at[w]]] for w in sorted(at)])
    assert len(want[-1]) < len(NER[-1][0])  # the long row was cut
    return {"f1": f1_score(want, got), "precision": precision_score(want, got),
            "recall": recall_score(want, got), "accuracy": accuracy_score(want, got)}


@pytest.fixture(scope="module")
def ner_by_id(ckpts: dict[str, Path], store: Path,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("ner-ids")
    data = jsonl(tmp / "ner.jsonl", [{"tokens": w, "label": t} for w, t in NER])
    return evaluate(ckpts["tokens"], store, tmp / "out", *CPU, f"eval.dataset.path={data}")


def test_token_classification_against_labels(ckpts: dict[str, Path],
                                              ner_by_id: dict[str, Any]) -> None:
    expected = ner_expected(ckpts["tokens"])
    assert ner_by_id["labelled"] and ner_by_id["samples"] == len(NER)
    assert ner_by_id["scores"]["pytorch"] == pytest.approx(expected, abs=1e-9)
    assert ner_by_id["scores"]["target"] == ner_by_id["scores"]["fp32_onnx"]
    assert 0.0 < expected["accuracy"] < 1.0 and 0.0 < expected["f1"] < 1.0  # informative
    assert ner_by_id["eval_drop"] == 0.0 and ner_by_id["eval_verdict"] == "PASS"


def test_token_classification_reads_tag_names_and_class_labels(
        ckpts: dict[str, Path], store: Path, tmp_path: Path, ner_by_id: dict[str, Any]) -> None:
    """Tag names, and a ClassLabel column whose ids are in another order than the model's,
    give the scores of the model's own ids."""
    import datasets

    names = jsonl(tmp_path / "names.jsonl",
                  [{"words": w, "ner_tags": [TAGS[i].lower() for i in t]} for w, t in NER])
    order = ["B-LOC", "I-LOC", "O", "B-PER", "I-PER"]
    features = datasets.Features({"tokens": datasets.List(datasets.Value("string")),
                                  "ner_tags": datasets.List(datasets.ClassLabel(names=order))})
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"tokens": [w for w, _ in NER],
                                "ner_tags": [[order.index(TAGS[i]) for i in t] for _, t in NER]},
                               features=features).save_to_disk(str(saved))
    for data in (names, saved):
        got = evaluate(ckpts["tokens"], store, tmp_path / data.stem, *CPU,
                       f"eval.dataset.path={data}")
        assert got["scores"] == ner_by_id["scores"], data.name


def test_token_classification_on_htp_agrees_on_the_shipped_inputs(
        ckpts: dict[str, Path], store: Path, tmp_path: Path) -> None:
    metrics = evaluate(ckpts["tokens"], store, tmp_path, *HTP)
    agrees(metrics)
    assert metrics["ep"] == "qnn" and metrics["samples"] == 8
    assert metrics["eval_verdict"] == "PASS"  # measured: the tags of every word agree


def test_a_label_per_word_is_required(ckpts: dict[str, Path], store: Path,
                                      tmp_path: Path) -> None:
    data = jsonl(tmp_path / "short.jsonl", [{"tokens": ["John", "lives"], "label": [1]}])
    code, _, err = run_json("model=local_hf", f"model.path={ckpts['tokens']}", "eval=task",
                            f"export.shapes.sequence_length={SEQ}", "perf=none", *CPU,
                            "verify=none", f"eval.dataset.path={data}", store=store,
                            outputs=tmp_path / "out")
    assert code != 0
    assert "eval.dataset.columns.label: row 0 has 2 words" in err
    assert "Traceback" not in err


# question answering

def qa_answers(ckpt: Path) -> list[str]:
    """transformers' model's answer to each question: the best start + end logit pair over
    the context's tokens, start <= end < start + 30."""
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ckpt))
    model = AutoModelForQuestionAnswering.from_pretrained(str(ckpt)).eval()
    answers = []
    for question, context in QA:
        enc = tok(question, context, truncation="only_second", max_length=SEQ,
                  padding="max_length", return_offsets_mapping=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            out = model(**enc)
        start, end = out.start_logits[0].tolist(), out.end_logits[0].tolist()
        inside = [p for p, s in enumerate(enc.sequence_ids(0)) if s == 1]
        i, j = max(((i, j) for i in inside for j in inside if i <= j < i + 30),
                   key=lambda p: start[p[0]] + end[p[1]])
        answers.append(context[offsets[i][0]:offsets[j][1]])
    return answers


def test_question_answering_against_labels(ckpts: dict[str, Path], store: Path,
                                           tmp_path: Path) -> None:
    """Gold answers made from the model's own: the same text, the same after SQuAD's
    normalization, the same and one more word, and a wrong one."""
    answers = qa_answers(ckpts["qa"])
    n = len(normalize_answer(answers[2]).split())
    assert all(normalize_answer(a) and "zebra" not in a for a in answers)
    golds = [[answers[0]], ["zebra", f"The {answers[1]}!"], [f"{answers[2]} zebra"], ["zebra"]]
    rows = [{"id": f"q{i}", "question": q, "context": c,
             "answers": {"text": g, "answer_start": [max(c.find(g[0]), 0)] * len(g)}}
            for i, ((q, c), g) in enumerate(zip(QA, golds, strict=True))]
    data = jsonl(tmp_path / "qa.jsonl", rows)
    metrics = evaluate(ckpts["qa"], store, tmp_path / "out", *CPU, f"eval.dataset.path={data}")
    assert metrics["labelled"] and metrics["metric"] == "f1"
    assert metrics["scores"]["pytorch"] == pytest.approx(
        {"exact_match": 0.5, "f1": (1 + 1 + 2 * n / (2 * n + 1) + 0) / 4})
    assert metrics["eval_verdict"] == "PASS"


def test_question_answering_agrees_on_the_shipped_inputs(ckpts: dict[str, Path], store: Path,
                                                         tmp_path: Path) -> None:
    agrees(evaluate(ckpts["qa"], store, tmp_path, *CPU))


# fill-mask

def mlm_top5(ckpt: Path, texts: list[str]) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
    """Per text: the masked positions, the tokens they held and transformers' model's top 5
    there, best first."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ckpt))
    model = AutoModelForMaskedLM.from_pretrained(str(ckpt)).eval()
    out = []
    for row, text in enumerate(texts):
        enc = tok(text, truncation=True, max_length=SEQ, padding="max_length",
                  return_tensors="pt")
        ids = enc["input_ids"][0]
        candidates = [p for p in range(len(ids)) if enc["attention_mask"][0, p]
                      and int(ids[p]) not in tok.all_special_ids]
        where = [int(p) for p in mask_positions(np.array(candidates), seed=row)]
        original = ids[where].numpy().copy()
        enc["input_ids"][0, where] = tok.mask_token_id
        with torch.no_grad():
            logits = model(**enc).logits[0, where]
        out.append((where, original, logits.topk(5).indices.numpy()))
    return out


def planted(ckpt: Path) -> list[str]:
    """MLM's texts with some masked words replaced by the model's own guesses (its 1st, or its
    3rd), so that a random model scores above 0: a masked word is not in the model's input,
    and every word here is one token, so the guesses stay what they were."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ckpt))
    assert all(len(tok.tokenize(w)) == 1 for t in MLM for w in t.split())
    texts = []
    for row, (where, _, top) in enumerate(mlm_top5(ckpt, MLM)):
        words = MLM[row].split()
        for k, pos in enumerate(where):
            guess = tok.convert_ids_to_tokens(int(top[k, 0 if (row + k) % 2 else 2]))
            if guess.isascii() and guess.isalpha():
                words[pos - 1] = guess  # position 0 is [CLS]
        texts.append(" ".join(words))
    return texts


def test_fill_mask_against_the_original_tokens(ckpts: dict[str, Path], store: Path,
                                               tmp_path: Path) -> None:
    texts = planted(ckpts["mlm"])
    results = mlm_top5(ckpts["mlm"], texts)
    want = np.concatenate([original for _, original, _ in results])
    top = np.concatenate([ranked for _, _, ranked in results])
    expected = {"accuracy": float(np.mean(top[:, 0] == want)),
                "top5_accuracy": float(np.mean((top == want[:, None]).any(-1)))}
    assert 0 < expected["accuracy"] < expected["top5_accuracy"] < 1  # informative
    data = jsonl(tmp_path / "mlm.jsonl", [{"text": t} for t in texts])
    metrics = evaluate(ckpts["mlm"], store, tmp_path / "out", *CPU, f"eval.dataset.path={data}")
    assert metrics["labelled"] and metrics["against"] == "labels"
    assert metrics["scores"]["pytorch"] == pytest.approx(expected, abs=1e-9)


def test_fill_mask_on_the_shipped_inputs_is_scored_against_their_tokens(
        ckpts: dict[str, Path], store: Path, tmp_path: Path) -> None:
    metrics = evaluate(ckpts["mlm"], store, tmp_path, *CPU)
    assert metrics["labelled"] and metrics["samples"] == 8
    assert metrics["eval_verdict"] == "PASS"
