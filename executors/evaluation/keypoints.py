"""Keypoint detection (top-down, ViTPose-like): the heatmaps [1, K, h, w] of one person's image
(the person's box cut out of the image when the truth gives one, else the whole image), the
argmax per keypoint taken at its cell's centre and mapped back to image coordinates (no
sub-pixel refinement); PCK@0.05 = the share of the labelled keypoints (visibility > 0) within
0.05 of the box's diagonal (the image's without a box) of the truth.

The truth (`keypoints` role) is a list of [x, y(, v)] per keypoint, COCO's flat
[x1, y1, v1, x2, ...], or COCO-style objects {"keypoints": ..., "bbox": [x, y, w, h]} (one,
a list of them, or the columns of several). Without labels it is PyTorch's keypoints on the
whole image, every keypoint counted."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Prepared, first
from executors.evaluation.data import image_array
from executors.evaluation.inputs import image_feed

PCK = 0.05
Person = tuple[np.ndarray, np.ndarray | None]      # keypoints [K, 3] (x, y, v), box xywh


def heatmap_points(heatmaps: np.ndarray, region: tuple[int, int, int, int]) -> np.ndarray:
    """[K, 2] image coordinates of each heatmap's maximum; `region` (x0, y0, w, h) is the part
    of the image the heatmaps [K, h, w] cover."""
    k, h, w = heatmaps.shape
    iy, ix = np.divmod(heatmaps.reshape(k, -1).argmax(-1), w)
    x0, y0, rw, rh = region
    return np.stack([x0 + (ix + 0.5) * rw / w, y0 + (iy + 0.5) * rh / h], axis=-1)


def pck(predicted: np.ndarray, truth: np.ndarray, visible: np.ndarray,
        norm: np.ndarray) -> tuple[int, int]:
    """(correct, counted) keypoints of persons [P, K, 2]: within PCK x norm [P] of the truth,
    among the visible [P, K] ones."""
    dist = np.linalg.norm(np.asarray(predicted, np.float64) - truth, axis=-1)
    close = dist <= PCK * np.asarray(norm, np.float64)[:, None]
    return int((close & visible).sum()), int(visible.sum())


def people(value: Any) -> list[Person]:
    """A keypoints cell (see the module docstring) as persons."""
    if value is None:
        return []
    if isinstance(value, list | tuple) and value and all(isinstance(o, dict) for o in value):
        return [p for o in value for p in people(o)]
    boxes = None
    if isinstance(value, dict):
        if "keypoints" not in value:
            raise EvalDataError("eval.dataset.columns.keypoints: an object without 'keypoints'; "
                                "map the keypoints role to a column of keypoints or COCO objects")
        boxes = value.get("bbox")
        value = value["keypoints"]
    points = _persons(np.asarray(value, np.float64))
    if boxes is not None:
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
        if len(boxes) != len(points):
            raise EvalDataError("eval.dataset.columns.keypoints: objects with a different number "
                                "of boxes and keypoint lists; give one bbox per person")
    return [(p, None if boxes is None else boxes[i]) for i, p in enumerate(points)]


def _persons(arr: np.ndarray) -> list[np.ndarray]:
    """Keypoints of one person ([K, 2|3] or flat 3K) or several ([P, K, 2|3] or [P, 3K]) as
    [K, 3] arrays, visibility 2 where none is given."""
    if arr.ndim == 1 or (arr.ndim == 2 and arr.shape[1] in (2, 3)):
        arr = arr[None]
    if arr.ndim == 2:
        if arr.shape[1] % 3:
            raise EvalDataError("eval.dataset.columns.keypoints: flat keypoints not in triples "
                                "(x, y, v); give [x, y(, v)] per keypoint")
        arr = arr.reshape(len(arr), -1, 3)
    if arr.ndim != 3 or arr.shape[-1] not in (2, 3):
        raise EvalDataError(f"eval.dataset.columns.keypoints: keypoints of shape "
                            f"{list(arr.shape)}; give [x, y(, v)] per keypoint")
    if arr.shape[-1] == 2:
        arr = np.concatenate([arr, np.full((*arr.shape[:2], 1), 2.0)], axis=-1)
    return list(arr)


def region_of(box: np.ndarray | None, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(x0, y0, w, h) in whole pixels of a box xywh on an image of `shape`, at least one
    pixel; the whole image without a box."""
    h, w = int(shape[0]), int(shape[1])
    if box is None:
        return 0, 0, w, h
    x0 = int(np.clip(np.floor(box[0]), 0, w - 1))
    y0 = int(np.clip(np.floor(box[1]), 0, h - 1))
    x1 = int(np.clip(np.ceil(box[0] + box[2]), x0 + 1, w))
    y1 = int(np.clip(np.ceil(box[1] + box[3]), y0 + 1, h))
    return x0, y0, x1 - x0, y1 - y0


class Keypoints(Evaluator):
    tasks = ("keypoint-detection",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        """One feed per person; `extra` per row: its feeds' indices, their regions and its
        persons (none without labels)."""
        feeds, extra = [], []
        for row in rows:
            img = image_array(row["image"])
            persons = people(row.get("keypoints")) if cx.labelled else []
            regions = [region_of(box, img.shape) for _, box in persons] or \
                ([] if cx.labelled else [region_of(None, img.shape)])
            index = list(range(len(feeds), len(feeds) + len(regions)))
            for x0, y0, w, h in regions:
                feeds.append(image_feed(cx, img[y0:y0 + h, x0:x0 + w]))
            extra.append((index, regions, persons))
        if not feeds:
            raise EvalDataError("eval.dataset.columns.keypoints: no evaluated row has a person; "
                                "map the keypoints role to a column of keypoints")
        return Prepared(feeds, rows, extra)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        name = "heatmaps" if "heatmaps" in outputs[0] else next(iter(outputs[0]))
        out = []
        for index, regions, _ in prepared.extra:
            points = [heatmap_points(first(outputs[i][name]), r)
                      for i, r in zip(index, regions, strict=True)]
            out.append({"points": np.array(points).reshape(len(index), -1, 2) if points
                        else np.zeros((0, 0, 2)),
                        "norm": np.array([np.hypot(w, h) for _, _, w, h in regions])})
        return out

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        out = []
        for _, regions, persons in prepared.extra:
            if len({len(p) for p, _ in persons}) > 1:
                raise EvalDataError("eval.dataset.columns.keypoints: persons of one row with "
                                    "different numbers of keypoints; give every person the "
                                    "whole skeleton (visibility 0 for the unlabelled)")
            out.append({"points": np.array([p[:, :2] for p, _ in persons]).reshape(
                            len(persons), -1, 2) if persons else np.zeros((0, 0, 2)),
                        "visible": np.array([p[:, 2] > 0 for p, _ in persons]).reshape(
                            len(persons), -1) if persons else np.zeros((0, 0), bool),
                        "norm": np.array([np.hypot(w, h) for _, _, w, h in regions])})
        return out

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        correct = counted = 0
        for p, t in zip(predictions, truth, strict=True):
            if not len(t["points"]):
                continue
            if p["points"].shape != t["points"].shape:
                raise EvalDataError(f"eval.dataset.columns.keypoints: {t['points'].shape[1]} "
                                    f"keypoints per person; the model predicts "
                                    f"{p['points'].shape[1]}; map the keypoints role to "
                                    "keypoints of the model's skeleton")
            visible = t.get("visible", np.ones(t["points"].shape[:2], bool))
            got = pck(p["points"], t["points"], visible, t["norm"])
            correct, counted = correct + got[0], counted + got[1]
        if counted == 0:
            raise EvalDataError("eval.dataset.columns.keypoints: no labelled keypoint (all "
                                "visibility 0); map the keypoints role to labelled keypoints")
        return {"pck": correct / counted}
