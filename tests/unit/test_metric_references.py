"""Every eval metric against an answer computed here, independently of the code under test, on
data where the answer is known and asymmetric: Spearman of embeddings of different norms
(ranks worked out by hand and by scipy), accuracy and macro F1 of predictions that vary with a
dataset whose label order is not the model's (by hand and by scikit-learn), WER, CER and BLEU
of texts of unequal length in both directions (a Levenshtein distance and the BLEU formula
written out here), COCO mAP and PCK of objects and keypoints written by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from executors.evaluation import detect, textscore
from executors.evaluation.base import Context, Prepared
from executors.evaluation.classify import Classify
from executors.evaluation.keypoints import Keypoints
from executors.evaluation.similarity import Similarity

# --- Spearman (sentence similarity) ---------------------------------------------------------

COSINES = [0.9, 0.1, 0.5, -0.3, 0.7]   # of each pair, by construction
GOLD = [5.0, 2.0, 1.0, 0.0, 4.0]       # ranks 5 3 2 1 4 against the cosines' 5 2 3 1 4


def pair(cosine: float, norms: tuple[float, float]) -> dict[str, np.ndarray]:
    """Two embeddings at a known angle, of different lengths (Spearman reads their cosine)."""
    a = np.array([1.0, 0.0, 0.0]) * norms[0]
    b = np.array([cosine, math.sqrt(1 - cosine ** 2), 0.0]) * norms[1]
    return {"a": a, "b": b}


def similarity_outputs() -> tuple[list[dict[str, np.ndarray]], Prepared]:
    outputs, extra = [], []
    for i, c in enumerate(COSINES):
        p = pair(c, (1.0 + 3 * i, 0.2 + i))  # lengths that would reorder the raw dot products
        extra.append((len(outputs), len(outputs) + 1))
        outputs += [{"sentence_embedding": p["a"][None]}, {"sentence_embedding": p["b"][None]}]
    return outputs, Prepared([{}] * len(outputs), [{"score": g} for g in GOLD], extra)


def test_spearman_of_pair_cosines_against_gold_scores_is_the_rank_formula() -> None:
    from scipy.stats import spearmanr

    outputs, prepared = similarity_outputs()
    cx = Context("sentence-similarity", {}, {}, None, labelled=True)
    family = Similarity()
    predictions = family.predict(outputs, prepared, cx)
    got = family.score(predictions, family.truth(prepared, cx), cx)
    # rho = 1 - 6 sum(d^2) / (n (n^2 - 1)), d = (0, 1, 1, 0, 0): 1 - 12 / 120
    assert got["spearman"] == pytest.approx(0.9)
    assert got["spearman"] == pytest.approx(spearmanr(COSINES, GOLD).statistic)


def test_spearman_of_single_inputs_ranks_every_pair_against_pytorchs() -> None:
    """Without a score column, each input's pairs' cosines are ranked against PyTorch's."""
    angles = np.radians([0.0, 50.0, 80.0, 170.0])
    unit = [np.array([math.cos(t), math.sin(t)]) for t in angles]
    torch_side = [(v,) for v in unit]
    # the target moves input 1 to 100 degrees: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    moved = [(unit[0],), (np.array([math.cos(math.radians(100)), math.sin(math.radians(100))]),),
             (unit[2],), (unit[3],)]
    cx = Context("feature-extraction", {}, {}, None, baseline=torch_side)
    got = Similarity().score(moved, torch_side, cx)  # no labels: PyTorch's are the truth

    def cosines(vs: list[np.ndarray]) -> list[float]:
        return [float(vs[i] @ vs[j]) for i in range(4) for j in range(i + 1, 4)]

    want_ranks = np.argsort(np.argsort(cosines(unit)))
    got_ranks = np.argsort(np.argsort(cosines([v for (v,) in moved])))
    d = want_ranks - got_ranks
    assert got["spearman"] == pytest.approx(1 - 6 * float(d @ d) / (6 * 35))
    assert got["spearman"] < 1.0
    # inputs 0 and 3 find other nearest neighbours: 2 and 1 instead of 1 and 2
    assert got["retrieval_agreement"] == pytest.approx(2 / 4)


# --- classification -------------------------------------------------------------------------

MODEL_LABELS = {"id2label": {"0": "negative", "1": "neutral", "2": "positive"}}
DATASET_NAMES = ["positive", "negative", "neutral"]   # the dataset's ClassLabel order
# each row: the dataset's label id, and the model's scores for classes 0, 1, 2
ROWS = [(0, [0.1, 0.2, 3.0]),   # positive, predicts positive
        (0, [2.0, 0.1, 0.3]),   # positive, predicts negative
        (1, [4.0, 0.0, 0.0]),   # negative, predicts negative
        (1, [1.0, 0.0, 0.5]),   # negative, predicts negative
        (2, [0.0, 2.0, 1.0]),   # neutral, predicts neutral
        (2, [0.0, 0.5, 1.0]),   # neutral, predicts positive
        (0, [0.0, 0.0, 1.0])]   # positive, predicts positive


def classification(names: list[str]) -> dict[str, float]:
    cx = Context("text-classification", {}, {}, None, dict(MODEL_LABELS), labelled=True,
                 label_names={"label": names})
    family = Classify()
    prepared = Prepared([{}] * len(ROWS), [{"label": label} for label, _ in ROWS])
    predictions = family.predict([{"logits": np.array([s])} for _, s in ROWS], prepared, cx)
    return family.score(predictions, family.truth(prepared, cx), cx)


def test_accuracy_and_macro_f1_read_the_datasets_label_names_in_its_own_order() -> None:
    from sklearn.metrics import f1_score

    got = classification(DATASET_NAMES)
    # model ids: truth 2 2 0 0 1 1 2, predicted 2 0 0 0 1 2 2
    assert got["accuracy"] == pytest.approx(5 / 7)
    # per class F1: negative 2*(2/3*1)/(5/3) = 0.8, neutral 2/3, positive 2*(2/3*2/3)/(4/3) = 2/3
    assert got["f1_macro"] == pytest.approx((0.8 + 2 / 3 + 2 / 3) / 3)
    assert got["f1_macro"] == pytest.approx(f1_score([2, 2, 0, 0, 1, 1, 2],
                                                     [2, 0, 0, 0, 1, 2, 2], average="macro"))
    assert got["f1_macro"] != pytest.approx(got["accuracy"])  # macro, not micro


def test_a_dataset_whose_label_order_is_the_models_scores_otherwise() -> None:
    """The same label ids read in the model's own order are other classes: another score."""
    # model ids 0 0 1 1 2 2 0 against the predicted 2 0 0 0 1 2 2
    assert classification(["negative", "neutral", "positive"])["accuracy"] == pytest.approx(2 / 7)


def test_top5_accuracy_counts_the_truth_among_the_five_best() -> None:
    scores = np.array([[7, 6, 5, 4, 3, 2, 1.0],     # truth 4: fifth best
                       [1, 2, 3, 4, 5, 6, 7.0],     # truth 1: sixth best
                       [0, 0, 0, 9, 0, 0, 0.0]])    # truth 3: best
    cx = Context("image-classification", {}, {}, None,
                 {"id2label": {str(i): f"c{i}" for i in range(7)}}, labelled=True)
    got = Classify().score(list(scores), [4, 1, 3], cx)
    assert got["accuracy"] == pytest.approx(1 / 3)
    assert got["top5_accuracy"] == pytest.approx(2 / 3)


# --- WER, CER, BLEU -------------------------------------------------------------------------

def edits(hyp: list[Any], ref: list[Any]) -> int:
    """Levenshtein distance, by the textbook's table."""
    row = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, 1):
        prev, row[0] = row[0], i
        for j, r in enumerate(ref, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (h != r))
    return row[-1]


HYPS = ["The cat sat.", "hello word"]
REFS = ["the cat sat on the mat", "Hello, world!"]


@pytest.mark.parametrize(("hyps", "refs", "wer", "cer"), [
    (HYPS, REFS, 4 / 8, 12 / 33),   # 3 words and 11 characters missing; 1 word, 1 character
    (REFS, HYPS, 4 / 5, 12 / 21),   # the other way round: the same edits over shorter texts
])
def test_error_rates_are_edits_over_the_reference_length(hyps: list[str], refs: list[str],
                                                          wer: float, cer: float) -> None:
    norm = [(textscore.normalize(h), textscore.normalize(r)) for h, r in zip(hyps, refs)]
    words = sum(edits(h.split(), r.split()) for h, r in norm) / sum(len(r.split())
                                                                     for _, r in norm)
    chars = sum(edits(list(h), list(r)) for h, r in norm) / sum(len(r) for _, r in norm)
    assert (words, chars) == (pytest.approx(wer), pytest.approx(cer))
    assert textscore.error_rates(hyps, refs) == {"wer": pytest.approx(wer),
                                                 "cer": pytest.approx(cer)}


def test_bleu_of_a_short_and_of_a_long_hypothesis() -> None:
    ref = "the quick brown fox jumps over"
    short = "the quick brown fox"
    # every n-gram of the short one is right; brevity penalty exp(1 - 6/4)
    assert textscore.bleu([short], [ref]) == pytest.approx(math.exp(-0.5))
    # the long one: 4/6 unigrams, 3/5 bigrams, 2/4 trigrams, 1/3 four-grams right, no penalty
    assert textscore.bleu([ref], [short]) == pytest.approx((4 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)


# --- detection and keypoints, labels written by hand ----------------------------------------

def test_coco_map_of_hand_written_objects_follows_the_101_point_interpolation() -> None:
    truth = [{"boxes": np.array([[10.0, 10, 50, 60], [60, 20, 90, 80]]),
              "labels": np.array([0, 0])}]
    boxes = np.array([[10.0, 10, 50, 60], [0, 70, 20, 95], [60, 20, 90, 80]])
    found = {"boxes": boxes, "labels": np.array([0, 0, 0]), "scores": np.array([0.9, 0.8, 0.7])}
    # hit, miss, hit: precision 1 up to recall 1/2 (51 points), then 2/3 (50 points)
    assert detect.coco_map([found], truth) == {"map": pytest.approx((51 + 50 * 2 / 3) / 101),
                                               "map_50": pytest.approx((51 + 50 * 2 / 3) / 101)}
    # the miss ranked first: precision 2/3 at every recall
    first_miss = dict(found, scores=np.array([0.8, 0.9, 0.7]))
    assert detect.coco_map([first_miss], truth)["map"] == pytest.approx(2 / 3)


def test_detect_reads_hand_written_coco_boxes_and_names() -> None:
    """COCO [x, y, w, h] in pixels and category names of the model: a detection that matches
    one of two objects scores half the recall, the other class's object none of it."""
    cx = Context("object-detection", {}, {}, None,
                 {"id2label": {"0": "cat", "1": "dog"}}, labelled=True)
    rows = [{"boxes": [{"bbox": [10, 10, 40, 50], "category": "dog"},
                       {"bbox": [60, 20, 30, 60], "category": "cat"}]}]
    family = detect.Detect()
    truth = family.truth(Prepared([], rows, [([0], [], (100, 100), [])]), cx)
    assert truth[0]["boxes"].tolist() == [[10, 10, 50, 60], [60, 20, 90, 80]]
    assert truth[0]["labels"].tolist() == [1, 0]
    found = [{"boxes": np.array([[10.0, 10, 50, 60]]), "labels": np.array([1]),
              "scores": np.array([0.9])}]
    # dog: AP 1; cat: never found, AP 0
    assert family.score(found, truth, cx)["map"] == pytest.approx(0.5)


def test_pck_of_keypoints_written_by_hand_in_each_persons_box() -> None:
    """Heatmaps whose maxima are known: each person's box is cut out, the maxima are mapped
    back into the image, and PCK counts the visible keypoints within 5% of the box's
    diagonal."""
    specs = {"model": [{"name": "pixel_values", "shape": [1, 3, 8, 8], "kind": "pixels"}]}
    cx = Context("keypoint-detection", specs, {"model": ["heatmaps"]}, None, labelled=True)
    image = np.zeros((100, 200, 3), np.uint8)
    # person 1 in box (0, 0, 40, 80), person 2 in (100, 20, 80, 40); two keypoints each
    people = [{"keypoints": [5, 12, 2, 35, 75, 2], "bbox": [0, 0, 40, 80]},
              {"keypoints": [110, 25, 2, 170, 55, 0], "bbox": [100, 20, 80, 40]}]
    family = Keypoints()
    prepared = family.prepare([{"image": image, "keypoints": people}], cx)
    assert prepared.extra[0][1] == [(0, 0, 40, 80), (100, 20, 80, 40)]

    def heatmaps(cells: list[tuple[int, int]]) -> dict[str, np.ndarray]:
        maps = np.zeros((1, len(cells), 4, 4))  # each cell a quarter of the box each way
        for k, (row, col) in enumerate(cells):
            maps[0, k, row, col] = 1.0
        return {"heatmaps": maps}

    # person 1: cell centres (5, 10) and (35, 70): 2 and 5 away, the limit 0.05 * 89.4 = 4.47
    # person 2: (110, 25) exactly; its second keypoint is not visible
    outputs = [heatmaps([(0, 0), (3, 3)]), heatmaps([(0, 0), (3, 3)])]
    predictions = family.predict(outputs, prepared, cx)
    assert predictions[0]["points"].tolist() == [[[5, 10], [35, 70]], [[110, 25], [170, 55]]]
    truth = family.truth(prepared, cx)
    assert family.score(predictions, truth, cx) == {"pck": pytest.approx(2 / 3)}
    # person 1's first keypoint one cell lower, (5, 30): 18 away
    lower = [heatmaps([(1, 0), (3, 3)]), heatmaps([(0, 0), (0, 0)])]
    assert family.score(family.predict(lower, prepared, cx), truth, cx) == \
        {"pck": pytest.approx(1 / 3)}
