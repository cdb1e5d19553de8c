"""BART's sequence-classification head (bart-large-mnli: zero-shot NLI) builds as one graph:
detected from its class and labels, pooled at the last end token the way HTP runs it (ArgMax
and a Gather, not NonZero and GatherND), equal to transformers' own forward, on CPU and HTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.models import tasks as T
from tests.checkpoints import text_checkpoint
from tests.integration.conftest import run_json, step

NLI = {"0": "contradiction", "1": "neutral", "2": "entailment"}
SHAPE = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
         "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
         "eos_token_id": 102, "bos_token_id": 101, "pad_token_id": 0,
         "decoder_start_token_id": 102, "forced_eos_token_id": 102}


@pytest.fixture(scope="module")
def mnli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # MiniLM's tokenizer: every sentence ends in [SEP] (102), BART's end token here
    return text_checkpoint(tmp_path_factory.mktemp("bart") / "mnli",
                           cls="BartForSequenceClassification", model_type="bart",
                           id2label=NLI, label2id={v: int(k) for k, v in NLI.items()}, **SHAPE)


def test_detected_as_zero_shot_classification_on_text() -> None:
    info = {"model_type": "bart", "architectures": ["BartForSequenceClassification"],
            "id2label": NLI, "vocab_size": 100, "d_model": 16}
    task, cls = T.detect({"task": None, "model_class": None}, info)
    assert (task, cls) == ("zero-shot-classification", "BartForSequenceClassification")
    assert T.task_modality(task, info, cls) == T.TEXT


def test_end_pooling_equals_transformers_forward(mnli: Path) -> None:
    import torch
    import transformers

    from executors.runtime import torchmodel

    model = transformers.BartForSequenceClassification.from_pretrained(str(mnli)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(mnli))
    enc = tok(["the cat sat on the mat", "a dog"], ["it rests", "an animal"],
              return_tensors="pt", padding=True)
    with torch.no_grad():
        want = model(**enc).logits
        got = torchmodel.end_pooled(model, dict(enc))["logits"]
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("target", ["cpu", pytest.param("qnn_htp", marks=pytest.mark.slow)])
def test_bart_mnli_builds_and_evaluates(tmp_path: Path, mnli: Path, target: str) -> None:
    code, record, err = run_json("model=local_hf", f"model.path={mnli}", f"target={target}",
                                 "quant=w8a16_pc", "perf=none", "export.shapes.sequence_length=32",
                                 "eval=task", "eval.dataset.samples=4",
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    assert step(record, "eval")["metrics"]["task"] == "zero-shot-classification"
    assert step(record, "verify")["metrics"]["cosine_mean"] > 0.99
    assert step(record, "eval")["metrics"]["eval_verdict"] == "PASS"
