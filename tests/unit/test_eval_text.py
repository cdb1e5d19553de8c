"""The text families of `eval` without a model: SQuAD normalization and scores, answer-span
picking, word alignment and tag naming, masked positions, and each family's metrics on
hand-made predictions (the names planner/models/evaluation.py declares)."""

from __future__ import annotations

import numpy as np
import pytest

from executors.evaluation.base import Context, EvalDataError, Prepared
from executors.evaluation.data import class_names
from executors.evaluation.evaluators import evaluator
from executors.evaluation.fillmask import FillMask, mask_positions
from executors.evaluation.qa import (
    QuestionAnswering,
    best_span,
    exact_match,
    golds_of,
    normalize_answer,
    token_f1,
)
from executors.evaluation.tokens import TokenTags, first_subtokens, iob, tag_namer, words_of
from planner.models.evaluation import EVAL

TAGS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


def context(task: str = "token-classification",
            label_names: dict[str, list[str]] | None = None) -> Context:
    return Context(task, {}, {}, None, {"id2label": {str(k): v for k, v in TAGS.items()}},
                   label_names=label_names or {})


# question answering

@pytest.mark.parametrize(("text", "want"), [
    ("The Eiffel Tower!", "eiffel tower"), ("an apple, a pear", "apple pear"),
    ("  Theatre  of   the  absurd. ", "theatre of absurd"), ("A", ""), ("...", ""),
    ("U.S.A.", "usa"), ("Anthem", "anthem")])
def test_normalize_answer_as_squad(text: str, want: str) -> None:
    assert normalize_answer(text) == want


def test_exact_match_and_f1_take_the_best_gold() -> None:
    assert exact_match("the Paris", ["London", "Paris."]) == 1.0
    assert exact_match("Paris France", ["Paris"]) == 0.0
    # "cat sat" against "cat sat down": precision 1, recall 2/3
    assert token_f1("The cat sat", ["dog", "a cat sat down"]) == pytest.approx(0.8)
    assert token_f1("cat cat", ["cat"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1("zebra", ["cat"]) == 0.0


def test_unanswerable_is_right_only_when_the_prediction_is_empty() -> None:
    golds = golds_of({"text": [], "answer_start": []})
    assert golds == [""]
    assert exact_match("", golds) == token_f1("", golds) == 1.0
    assert exact_match("Paris", golds) == token_f1("Paris", golds) == 0.0
    assert token_f1("", ["Paris"]) == 0.0


@pytest.mark.parametrize(("cell", "want"), [
    ({"text": ["Paris", "paris"], "answer_start": [0, 0]}, ["Paris", "paris"]),
    ("Paris", ["Paris"]), (["Paris", "the city"], ["Paris", "the city"]),
    ([{"text": "Paris", "answer_start": 3}], ["Paris"]), (["", "  "], [""]),
    (["the", "Paris"], ["Paris"])])
def test_gold_answers_in_every_form(cell: object, want: list[str]) -> None:
    assert golds_of(cell) == want


def test_gold_answers_of_another_type_name_the_column() -> None:
    with pytest.raises(EvalDataError, match=r"eval\.dataset\.columns\.answers"):
        golds_of(None)


def test_best_span_keeps_start_before_end_inside_the_context() -> None:
    # [CLS] (position 0, not allowed) scores highest; start 7 + end 4 is an end before a start
    start = np.array([9, 0, 0, 0.1, 0.2, 3, 0, 5, 0, 0, 0, 0])
    end = np.array([9, 0, 0, 0, 5, 0, 2, 0.5, 0, 0, 0, 0])
    allowed = np.array([False] * 3 + [True] * 8 + [False])
    assert best_span(start, end, allowed) == (7, 7)          # 5.5
    end[7] = 0.0
    assert best_span(start, end, allowed) == (4, 4)          # 5.2 over (3, 4) 5.1, (5, 6) 5
    assert best_span(start, end, np.zeros(12, bool)) is None


def test_best_span_is_at_most_max_len_tokens() -> None:
    start, end = np.zeros(64), np.zeros(64)
    start[2], end[40], end[20] = 4.0, 4.0, 1.0
    allowed = np.ones(64, bool)
    assert best_span(start, end, allowed, max_len=30) == (2, 20)
    assert best_span(start, end, allowed, max_len=39) == (2, 40)


def qa_outputs(start: list[float], end: list[float]) -> dict[str, np.ndarray]:
    return {"start_logits": np.array([start], np.float32),
            "end_logits": np.array([end], np.float32)}


def test_qa_predicts_the_empty_answer_only_for_a_dataset_with_unanswerable_questions() -> None:
    """SQuAD v2: the null score ([CLS] start + end) against the best span's."""
    context_text = "Paris is big"
    spans = [None, (0, 5), (6, 8), (9, 12), None]
    outputs = [qa_outputs([6, 1, 0, 0, 0], [6, 0, 0, 2, 0])]  # null 12 > span (1, 3) 3
    answerable = Prepared([{}], [{"answers": ["Paris"]}], [(context_text, spans, 0)])
    unanswerable = Prepared([{}], [{"answers": []}], [(context_text, spans, 0)])
    qa = QuestionAnswering()
    assert qa.predict(outputs, answerable, context("question-answering")) == ["Paris is big"]
    assert qa.predict(outputs, unanswerable, context("question-answering")) == [""]


def test_qa_scores_against_labels_and_against_pytorch_answers() -> None:
    qa, cx = QuestionAnswering(), context("question-answering")
    labelled = qa.score(["Paris", "cat sat", ""], [["paris"], ["a cat sat down"], [""]], cx)
    assert labelled == {"exact_match": pytest.approx(2 / 3), "f1": pytest.approx(2.8 / 3)}
    agreement = qa.score(["Paris", "cat", ""], ["Paris", "cat sat", ""], cx)  # PyTorch's
    assert agreement["exact_match"] == pytest.approx(2 / 3)
    assert set(labelled) == set(EVAL["question-answering"].metrics)


# token classification

def test_each_word_is_read_at_its_first_sub_token() -> None:
    # [CLS] John Smith##s lives [SEP] [PAD]: 3 words
    assert first_subtokens([None, 0, 1, 1, 2, None, None], 3) == [1, 2, 4]
    # an empty word has no sub-token; truncation cut off the last two words
    assert first_subtokens([None, 0, 2, 2, None], 5) == [1, None, 2, None, None]


@pytest.mark.parametrize(("tag", "want"), [
    ("O", "O"), ("B-PER", "B-PER"), ("I-LOC", "I-LOC"), ("S-ORG", "S-ORG"), ("PER", "I-PER"),
    ("LABEL_3", "I-LABEL_3"), ("BIG", "I-BIG")])
def test_tags_are_given_to_seqeval_with_a_prefix(tag: str, want: str) -> None:
    assert iob(tag) == want


def test_tag_cells_become_the_models_tag_names() -> None:
    tag = tag_namer(context())
    assert [tag(v, 0) for v in (0, np.int64(1), "2", "b-loc", "I-LOC")] == \
        ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    with pytest.raises(EvalDataError, match=r"columns\.label: tag id 7 \(row 3\)"):
        tag(7, 3)
    with pytest.raises(EvalDataError, match=r"columns\.label: tag 'B-ORG' \(row 0\).*B-PER"):
        tag("B-ORG", 0)


def test_class_label_ids_are_the_datasets_and_are_mapped_by_name() -> None:
    names = ["B-LOC", "I-LOC", "O", "B-PER", "I-PER"]   # the dataset's order, not the model's
    tag = tag_namer(context(label_names={"label": names}))
    assert [tag(i, 0) for i in range(5)] == names
    bad = tag_namer(context(label_names={"label": ["O", "B-MISC"]}))
    with pytest.raises(EvalDataError, match="not one of the model's tags"):
        bad(1, 0)


def test_class_label_names_are_found_in_a_datasets_features() -> None:
    import datasets

    labels = datasets.ClassLabel(names=["O", "B-PER"])
    assert class_names(labels) == ["O", "B-PER"]
    assert class_names(datasets.List(labels)) == ["O", "B-PER"]
    assert class_names(datasets.Value("int64")) == []
    assert class_names(datasets.List(datasets.Value("string"))) == []


def test_words_must_be_a_list() -> None:
    assert words_of(["a", 1], 0) == ["a", "1"]
    with pytest.raises(EvalDataError, match=r"columns\.tokens: row 2 holds str"):
        words_of("John lives in Paris", 2)


def test_token_metrics_are_seqevals_entity_scores_and_word_accuracy() -> None:
    want = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    got = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    scores = TokenTags().score(got, want, context())  # seqeval's own example; 8 of 10 words
    assert scores == {"f1": 0.5, "precision": 0.5, "recall": 0.5, "accuracy": 0.8}
    assert set(scores) == set(EVAL["token-classification"].metrics)


def test_no_entity_on_either_side_is_full_agreement() -> None:
    scores = TokenTags().score([["O", "O"]], [["O", "O"]], context())
    assert scores == {"f1": 1.0, "precision": 1.0, "recall": 1.0, "accuracy": 1.0}
    missed = TokenTags().score([["O", "O"]], [["B-PER", "O"]], context())
    assert missed["f1"] == missed["recall"] == 0.0 and missed["accuracy"] == 0.5


def test_truth_keeps_the_words_the_graph_saw_and_checks_their_count() -> None:
    rows = [{"tokens": ["a", "b", "c"], "label": [1, 2, 0]}]
    prepared = Prepared([{}], rows, [[1, None, 2]])
    assert TokenTags().truth(prepared, context()) == [["B-PER", "O"]]
    short = Prepared([{}], [{"tokens": ["a", "b"], "label": [1]}], [[1, 2]])
    with pytest.raises(EvalDataError, match=r"columns\.label: row 0 has 2 words"):
        TokenTags().truth(short, context())


# fill-mask

def test_masked_positions_are_about_15_percent_and_the_same_for_a_row() -> None:
    candidates = np.arange(1, 41)
    chosen = mask_positions(candidates, seed=3)
    assert len(chosen) == 6 and set(chosen) <= set(candidates)
    assert list(chosen) == sorted(chosen)
    assert np.array_equal(chosen, mask_positions(candidates, seed=3))
    assert not np.array_equal(chosen, mask_positions(candidates, seed=4))
    assert len(mask_positions(np.array([5]), seed=0)) == 1       # at least one
    assert len(mask_positions(np.array([], np.int64), seed=0)) == 0


def test_fill_mask_accuracy_is_top1_and_top5_on_masked_tokens() -> None:
    ranked = [np.array([[7, 1, 2, 3, 4], [9, 8, 7, 6, 5]]), np.array([[1, 2, 3, 4, 5]]),
              np.zeros((0, 5), np.int64)]                     # a row with nothing masked
    truth = [np.array([7, 6]), np.array([42]), np.array([], np.int64)]
    scores = FillMask().score(ranked, truth, context("fill-mask"))
    assert scores == {"accuracy": pytest.approx(1 / 3), "top5_accuracy": pytest.approx(2 / 3)}
    assert set(scores) == set(EVAL["fill-mask"].metrics)
    with pytest.raises(EvalDataError, match=r"columns\.text"):
        FillMask().score([np.zeros((0, 5))], [np.array([], np.int64)], context("fill-mask"))


@pytest.mark.parametrize("task", ["token-classification", "question-answering", "fill-mask"])
def test_text_tasks_have_a_family(task: str) -> None:
    assert task in evaluator(task).tasks
