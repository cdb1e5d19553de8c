"""The vision families' pure parts: mIoU and pixel accuracy, AbsRel and delta1 with median
scaling, box conversion and post-processing, COCO mAP (faster-coco-eval), PCK, the truth
formats each family reads, zero-shot prompts in groups of the graph's text batch, and the
metric names each family returns against the ones planner/models/evaluation.py declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from executors.evaluation import depth, detect, keypoints, segment, zeroshot
from executors.evaluation.base import Context, EvalDataError
from executors.evaluation.evaluators import evaluator
from planner.models.evaluation import EVAL
from tests.checkpoints import minilm_dir


def context(task: str, labelled: bool = True, **info: Any) -> Context:
    return Context(task, {"model": []}, {"model": []}, None, info, labelled)


# --- segmentation ---------------------------------------------------------------------------

def test_miou_counts_the_classes_present_and_ignores_255() -> None:
    truth = np.array([[0, 0, 1, 1], [0, 0, 1, 255]])
    pred = np.array([[0, 0, 1, 0], [0, 2, 1, 1]])
    got = segment.segmentation_scores([pred], [truth])
    # class 0: 3 hits, union 5; class 1: 2 hits, union 3; class 2 (predicted only): 0 / 1
    assert got["miou"] == pytest.approx((3 / 5 + 2 / 3 + 0) / 3)
    assert got["pixel_accuracy"] == pytest.approx(5 / 7)
    assert segment.segmentation_scores([truth.clip(0, 1)], [truth]) == {
        "miou": 1.0, "pixel_accuracy": 1.0}


def test_confusion_matches_scikit_learn() -> None:
    from sklearn.metrics import confusion_matrix

    rng = np.random.default_rng(0)
    truth, pred = rng.integers(0, 4, (16, 16)), rng.integers(0, 4, (16, 16))
    assert (segment.confusion(pred, truth, 4) ==
            confusion_matrix(truth.ravel(), pred.ravel(), labels=range(4))).all()


def test_upsampled_argmax_in_class_groups_equals_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    logits = np.random.default_rng(1).normal(size=(7, 5, 6)).astype(np.float32)
    whole = torch.nn.functional.interpolate(torch.from_numpy(logits)[None], size=(11, 13),
                                            mode="bilinear", align_corners=False)[0].argmax(0)
    monkeypatch.setattr(segment, "CHUNK", 2 * 11 * 13)  # two classes at a time
    assert (segment.upsampled_argmax(logits, (11, 13)) == whole.numpy()).all()


def test_masks_are_read_as_class_ids_and_reduced_like_the_processor(tmp_path: Path) -> None:
    from PIL import Image

    mask = np.array([[0, 1], [2, 255]], np.uint8)
    Image.fromarray(mask, mode="L").save(tmp_path / "m.png")
    assert (segment.label_mask(str(tmp_path / "m.png")) == mask).all()
    assert segment.label_mask(np.stack([mask] * 3, -1)).tolist() == mask.tolist()
    assert segment.label_mask(mask, reduce_labels=True).tolist() == [[255, 0], [1, 255]]
    with pytest.raises(EvalDataError, match="colour image"):
        segment.label_mask(np.stack([mask, mask + 1, mask], -1))


# --- depth ----------------------------------------------------------------------------------

def test_abs_rel_and_delta1_after_median_scaling() -> None:
    gt = np.array([[1.0, 2.0, 0.0]])           # 0: no measurement
    assert depth.depth_errors(gt * 7.0, gt) == (0.0, 1.0)  # a scale is no error
    # scaled by median(gt) / median(pred) = 1.5 / 2.5: [0.6, 2.4] against [1, 2]
    abs_rel, delta1 = depth.depth_errors(np.array([[1.0, 4.0, 9.0]]), gt)
    assert abs_rel == pytest.approx((0.4 / 1 + 0.4 / 2) / 2)
    assert delta1 == 0.5                        # 1 / 0.6 > 1.25, 2.4 / 2 < 1.25
    with pytest.raises(EvalDataError, match="no pixel > 0"):
        depth.depth_errors(gt, np.zeros_like(gt))


def test_depth_maps_of_16_bit_images_and_arrays(tmp_path: Path) -> None:
    from PIL import Image

    mm = np.array([[500, 1000], [0, 65535]], np.uint16)
    Image.fromarray(mm).save(tmp_path / "d.png")
    assert depth.depth_map(str(tmp_path / "d.png")).tolist() == mm.tolist()
    assert depth.depth_map([[[1.0, 2.0]]]).tolist() == [[1.0, 2.0]]
    assert depth.upsampled(np.ones((2, 3), np.float32), (4, 6)).shape == (4, 6)


# --- detection ------------------------------------------------------------------------------

def test_relative_centre_boxes_become_absolute_corners() -> None:
    got = detect.corners(np.array([[0.5, 0.5, 0.5, 0.25], [0.1, 0.2, 0.2, 0.2]]), (100, 200))
    np.testing.assert_allclose(got, [[50.0, 37.5, 150.0, 62.5], [0.0, 10.0, 40.0, 30.0]])


def test_postprocess_follows_the_models_convention() -> None:
    boxes = np.array([[0.5, 0.5, 0.2, 0.2], [0.2, 0.2, 0.1, 0.1]])
    logits = np.array([[4.0, 0.0, 0.0], [0.0, 1.0, 9.0]])   # query 1 says "no object"
    soft = detect.postprocess(logits, boxes, (10, 10), "softmax")
    assert soft["labels"].tolist() == [0, 1] and soft["scores"][0] > 0.9 > soft["scores"][1]
    focal = detect.postprocess(logits, boxes, (10, 10), "focal")
    assert len(focal["scores"]) == 6 and focal["labels"][0] == 2  # every (query, class) pair
    assert (np.diff(focal["scores"]) <= 0).all()
    query = detect.postprocess(logits, boxes, (10, 10), "query")
    assert query["labels"].tolist() == [2, 0]                     # best query per box
    assert query["scores"].tolist() == pytest.approx([1 / (1 + np.exp(-9)), 1 / (1 + np.exp(-4))])


def test_the_scoring_style_comes_from_the_config() -> None:
    assert detect.style_of(context("object-detection", model_type="detr")) == "softmax"
    assert detect.style_of(context("object-detection", model_type="yolos")) == "softmax"
    assert detect.style_of(context("object-detection", model_type="rt_detr")) == "focal"
    assert detect.style_of(context("object-detection", model_type="deformable_detr")) == "focal"
    assert detect.style_of(context("object-detection", model_type="rt_detr",
                                   use_focal_loss=False)) == "softmax"
    assert detect.style_of(context("zero-shot-object-detection")) == "query"


def _objects(boxes: list[list[float]], labels: list[int],
             scores: list[float] | None = None) -> detect.Detections:
    out = {"boxes": np.array(boxes, np.float64).reshape(-1, 4), "labels": np.array(labels)}
    if scores is not None:
        out["scores"] = np.array(scores)
    return out


def test_coco_map_of_perfect_and_shifted_detections() -> None:
    truth = [_objects([[10, 10, 50, 60], [70, 20, 90, 80]], [0, 1]),
             _objects([[5, 5, 25, 45]], [0])]
    perfect = [dict(t, scores=np.linspace(0.9, 0.5, len(t["labels"]))) for t in truth]
    assert detect.coco_map(perfect, truth) == {"map": 1.0, "map_50": 1.0}
    shifted = [dict(p, boxes=p["boxes"] + 6.0) for p in perfect]
    got = detect.coco_map(shifted, truth)
    assert 0.0 < got["map"] < got["map_50"] <= 1.0
    wrong_class = [dict(p, labels=1 - p["labels"]) for p in perfect]
    assert detect.coco_map(wrong_class, truth) == {"map": 0.0, "map_50": 0.0}


def test_truth_objects_in_both_dataset_formats() -> None:
    def class_id(c: Any) -> int:
        return {"cat": 0, "dog": 1}.get(c, c)

    hf = detect.truth_objects({"bbox": [[1, 2, 3, 4], [0, 0, 10, 10]], "category": [1, "cat"]},
                              class_id)
    assert hf["boxes"].tolist() == [[1, 2, 4, 6], [0, 0, 10, 10]]
    assert hf["labels"].tolist() == [1, 0]
    listed = detect.truth_objects([{"bbox": [1, 2, 3, 4], "category": "dog"}], class_id)
    assert listed["boxes"].tolist() == [[1, 2, 4, 6]] and listed["labels"].tolist() == [1]
    assert len(detect.truth_objects(None, class_id)["labels"]) == 0
    with pytest.raises(EvalDataError, match="columns.boxes"):
        detect.truth_objects({"bbox": [[1, 2, 3, 4]]}, class_id)


def test_without_labels_pytorch_confident_detections_are_the_truth() -> None:
    det = _objects([[0, 0, 10, 10], [0, 0, 20, 20], [0, 0, 30, 0.5]], [0, 1, 0],
                   [0.9, 0.2, 0.1])
    assert detect.confident(det)["scores"].tolist() == [0.9]
    unsure = dict(det, scores=np.array([0.2, 0.1, 0.05]))
    kept = detect.confident(unsure)  # none confident: the best, boxes under a pixel left out
    assert kept["scores"].tolist() == [0.2, 0.1]


# --- keypoints ------------------------------------------------------------------------------

def test_heatmap_maxima_in_image_coordinates() -> None:
    maps = np.zeros((2, 4, 3))
    maps[0, 1, 2] = maps[1, 3, 0] = 1.0
    # each cell of a 3x4 heatmap covers 10x5 pixels of a box at (100, 50)
    got = keypoints.heatmap_points(maps, (100, 50, 30, 20))
    assert got.tolist() == [[125.0, 57.5], [105.0, 67.5]]


def test_pck_counts_visible_keypoints_within_a_twentieth_of_the_diagonal() -> None:
    truth = np.array([[[0.0, 0.0], [10.0, 10.0], [50.0, 50.0]]])
    pred = truth + np.array([[[4.0, 3.0], [6.0, 0.0], [90.0, 0.0]]])   # 5, 6 and 90 away
    assert keypoints.pck(pred, truth, np.array([[True, True, True]]), np.array([100.0])) == \
        (1, 3)
    assert keypoints.pck(pred, truth, np.array([[True, False, False]]), np.array([100.0])) == \
        (1, 1)


def test_keypoint_cells_in_every_format() -> None:
    one = keypoints.people([[1, 2], [3, 4]])
    assert len(one) == 1 and one[0][0].tolist() == [[1, 2, 2], [3, 4, 2]] and one[0][1] is None
    flat = keypoints.people({"keypoints": [1, 2, 0, 3, 4, 2], "bbox": [0, 0, 5, 5]})
    assert flat[0][0][:, 2].tolist() == [0, 2] and flat[0][1].tolist() == [0, 0, 5, 5]
    columns = keypoints.people({"keypoints": [[1, 2, 1, 3, 4, 1], [5, 6, 1, 7, 8, 1]],
                                "bbox": [[0, 0, 5, 5], [1, 1, 5, 5]]})
    listed = keypoints.people([{"keypoints": [1, 2, 1, 3, 4, 1], "bbox": [0, 0, 5, 5]},
                               {"keypoints": [[5, 6, 1], [7, 8, 1]], "bbox": [1, 1, 5, 5]}])
    assert [p.tolist() for p, _ in columns] == [p.tolist() for p, _ in listed]
    assert keypoints.region_of(np.array([-2.0, 3.5, 10.0, 100.0]), (40, 30)) == (0, 3, 8, 37)
    with pytest.raises(EvalDataError, match="triples"):
        keypoints.people([[1, 2, 3, 4]])


# --- zero-shot ------------------------------------------------------------------------------

def test_queries_and_their_names() -> None:
    assert zeroshot.row_queries("a cat, a dog") == ["a cat", "a dog"]
    assert zeroshot.row_queries(None) == list(zeroshot.QUERIES)
    assert zeroshot.query_index(["a cat", "a photo of a dog"], "Dog") == 1
    assert zeroshot.query_index(["a cat"], 0) == 0
    with pytest.raises(EvalDataError, match="none of the text queries"):
        zeroshot.query_index(["a cat"], "a horse")


def test_class_names_dataset_first_then_the_models_then_the_labels() -> None:
    rows = [{"label": 1}, {"label": 0}]
    cx = context("zero-shot-image-classification", id2label={"0": "tabby", "1": "rocket"})
    assert zeroshot.class_names(rows, cx) == ["tabby", "rocket"]
    cx.label_names = {"label": ["cat", "dog"]}
    assert zeroshot.class_names(rows, cx) == ["cat", "dog"]
    placeholder = context("zero-shot-image-classification",
                          id2label={"0": "LABEL_0", "1": "LABEL_1"})
    assert zeroshot.class_names(rows, placeholder) is None
    named = [{"label": "dog"}, {"label": "cat"}, {"label": "dog"}]
    assert zeroshot.class_names(named, placeholder) == ["cat", "dog"]


def text_image_context(text_batch: int) -> Context:
    specs = [{"name": "input_ids", "shape": [text_batch, 8], "kind": "token_ids"},
             {"name": "attention_mask", "shape": [text_batch, 8], "kind": "attention_mask"},
             {"name": "pixel_values", "shape": [1, 3, 8, 8], "kind": "pixels"}]
    return Context("zero-shot-image-classification", {"model": specs},
                   {"model": ["logits_per_image"]}, minilm_dir(), {}, True)


def test_prompts_go_through_the_graphs_text_batch_in_groups() -> None:
    cx = text_image_context(2)
    pixels = {"pixel_values": np.zeros((1, 3, 8, 8), np.float32)}
    feeds, counts = zeroshot.query_feeds(cx, ["a cat", "a dog", "a rocket"], pixels)
    assert counts == [2, 1] and len(feeds) == 2
    assert feeds[1]["input_ids"].shape == (2, 8)
    assert (feeds[1]["input_ids"][0] == feeds[1]["input_ids"][1]).all()  # filled up
    assert (feeds[0]["input_ids"][1] != feeds[1]["input_ids"][0]).any()


def test_zero_shot_classification_puts_the_groups_back_together() -> None:
    cx = text_image_context(2)
    cx.label_names = {"label": ["cat", "dog", "rocket"]}
    family = evaluator("zero-shot-image-classification")
    rows = [{"image": np.zeros((8, 8, 3), np.uint8), "label": 2}]
    prepared = family.prepare(rows, cx)
    outputs = [{"logits_per_image": np.array([[1.0, 2.0]])},
               {"logits_per_image": np.array([[5.0, 5.0]])}]
    got = family.predict(outputs, prepared, cx)
    assert got[0].tolist() == [1.0, 2.0, 5.0]
    assert family.score(got, family.truth(prepared, cx), cx) == {"accuracy": 1.0}


# --- the declared metric names --------------------------------------------------------------

def _scored(task: str) -> dict[str, float]:
    family = evaluator(task)
    cx = context(task)
    if task == "image-segmentation":
        m = np.array([[0, 1]])
        return family.score([m], [m], cx)
    if task == "depth-estimation":
        d = np.array([[1.0, 2.0]])
        return family.score([d], [d], cx)
    if task in ("object-detection", "zero-shot-object-detection"):
        t = _objects([[0, 0, 5, 5]], [0])
        return family.score([dict(t, scores=np.array([0.9]))], [t], cx)
    if task == "keypoint-detection":
        p = {"points": np.zeros((1, 2, 2)), "norm": np.ones(1)}
        return family.score([p], [p], cx)
    return family.score([np.array([0.1, 0.9])], [1], cx)


@pytest.mark.parametrize("task", ["image-segmentation", "depth-estimation", "object-detection",
                                  "zero-shot-object-detection", "keypoint-detection",
                                  "zero-shot-image-classification"])
def test_each_family_returns_the_metrics_its_task_declares(task: str) -> None:
    got = _scored(task)
    assert set(got) == set(EVAL[task].metrics)
