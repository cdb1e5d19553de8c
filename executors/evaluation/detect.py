"""Object detection (and zero-shot detection with text queries): COCO mAP@[.5:.95] and mAP@.5
computed by faster-coco-eval on ground truth and detections built in memory.

Post-processing follows transformers' conventions for the model: DETR-like models (DETR, YOLOS,
Table Transformer) score each query by a softmax whose last class is "no object"; models trained
with a focal loss (`use_focal_loss` in config.json: RT-DETR, D-FINE; or Deformable and
Conditional DETR) by a sigmoid, keeping the best (query, class) pairs; OWL-ViT-like zero-shot
models by the sigmoid of a query's best text query. Boxes (cx, cy, w, h, relative to the input)
become absolute (x0, y0, x1, y1) on the image, which the image processor resized whole.

The truth (`boxes` role) is a list of objects {bbox, category} or the `objects` column of the
Hugging Face detection datasets ({"bbox": [[x, y, w, h], ...], "category": [...]}), boxes in
COCO's [x, y, width, height] pixels, categories class ids or names (of the model's id2label;
of the text queries for zero-shot detection). Without labels it is mAP against PyTorch's
detections: PyTorch's detections scoring at least CONFIDENT (or, on an image with none, its TOP
best), and at least a pixel wide and high, are the truth, and every model's detections are kept
by that same rule, so PyTorch scores 1 against itself.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Prepared, first
from executors.evaluation.data import image_array
from executors.evaluation.inputs import image_feed
from executors.evaluation.zeroshot import query_feeds, query_index, row_queries

CONFIDENT = 0.3      # without labels: PyTorch's detections at least this sure are the truth
TOP = 5              # ... or, on an image where none is, its TOP best
MAX_DETECTIONS = 100  # COCO's maxDets
FOCAL_TYPES = frozenset({"rt_detr", "rt_detr_v2", "d_fine", "deimv2", "deformable_detr",
                         "conditional_detr", "dab-detr", "deta", "lw_detr", "rf_detr"})

Detections = dict[str, np.ndarray]   # boxes [N, 4] xyxy pixels, labels [N] (, scores [N])


def corners(boxes: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Relative (cx, cy, w, h) boxes as absolute (x0, y0, x1, y1) on an image of size (h, w)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    h, w = size
    xyxy = np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2,
                     b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2], axis=-1)
    return xyxy * np.array([w, h, w, h], np.float64)


def postprocess(logits: np.ndarray, boxes: np.ndarray, size: tuple[int, int],
                style: str) -> Detections:
    """One image's detections from its logits [Q, C] and boxes [Q, 4], best first: `style` is
    softmax (last class = no object), focal (sigmoid, best (query, class) pairs) or query
    (sigmoid of each box's best text query)."""
    from scipy.special import expit, softmax

    logits = np.asarray(logits, np.float64)
    xyxy = corners(boxes, size)
    if style == "softmax":
        prob = softmax(logits, axis=-1)[:, :-1]
        labels, scores, which = prob.argmax(-1), prob.max(-1), np.arange(len(prob))
    elif style == "focal":
        scores = expit(logits).reshape(-1)
        which, labels = np.divmod(np.arange(scores.size), logits.shape[1])
    else:
        labels, scores, which = logits.argmax(-1), expit(logits.max(-1)), np.arange(len(logits))
    order = np.argsort(-scores, kind="stable")[:MAX_DETECTIONS]
    return {"boxes": xyxy[which[order]], "scores": scores[order],
            "labels": labels[order].astype(np.int64)}


def style_of(cx: Context) -> str:
    """How this model's logits become scores (see the module docstring)."""
    if cx.task == "zero-shot-object-detection":
        return "query"
    focal = cx.info.get("use_focal_loss")
    if focal is not None:
        return "focal" if focal else "softmax"
    return "focal" if cx.info.get("model_type") in FOCAL_TYPES else "softmax"


def confident(det: Detections) -> Detections:
    """The detections scoring at least CONFIDENT, else the TOP best (detections come best
    first); boxes under a pixel wide or high are left out (nothing can match them)."""
    sides = det["boxes"][:, 2:] - det["boxes"][:, :2]
    sized = (sides >= 1.0).all(-1)
    keep = sized & (det["scores"] >= CONFIDENT)
    if not keep.any():
        keep = sized & (np.cumsum(sized) <= TOP)
    return {k: v[keep] for k, v in det.items()}


def coco_map(predictions: list[Detections], truth: list[Detections]) -> dict[str, float]:
    """COCO mAP@[.5:.95] and mAP@.5 (faster-coco-eval) of per-image detections against per-image
    truth, both in absolute xyxy pixels."""
    from faster_coco_eval import COCO, COCOeval_faster

    def xywh(box: np.ndarray) -> list[float]:
        x0, y0, x1, y1 = (float(v) for v in box)
        return [x0, y0, x1 - x0, y1 - y0]

    anns = []
    for i, t in enumerate(truth):
        for b, c in zip(t["boxes"], t["labels"], strict=True):
            box = xywh(b)
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(c) + 1,
                         "bbox": box, "area": box[2] * box[3], "iscrowd": 0})
    dets = [{"image_id": i + 1, "category_id": int(c) + 1, "bbox": xywh(b), "score": float(s)}
            for i, p in enumerate(predictions)
            for b, c, s in zip(p["boxes"], p["labels"], p["scores"], strict=True)]
    cats = sorted({a["category_id"] for a in anns} | {d["category_id"] for d in dets})
    quiet = logging.getLogger(__name__).debug
    gt = COCO({"images": [{"id": i + 1} for i in range(len(truth))], "annotations": anns,
               "categories": [{"id": c} for c in cats]}, print_function=quiet)
    ev = COCOeval_faster(gt, gt.loadRes(dets), iouType="bbox", print_function=quiet)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return {"map": max(0.0, float(ev.stats[0])), "map_50": max(0.0, float(ev.stats[1]))}


def truth_objects(value: Any, category: Any) -> Detections:
    """A boxes cell (see the module docstring) as xyxy boxes and class ids; `category` maps a
    category cell to a class id."""
    if value is None:
        return {"boxes": np.zeros((0, 4)), "labels": np.zeros(0, np.int64)}
    if isinstance(value, dict):
        boxes = value.get("bbox", value.get("boxes"))
        cats = next((value[k] for k in ("category", "category_id", "label", "labels",
                                        "categories") if k in value), None)
        if boxes is not None and len(boxes) and np.ndim(boxes) == 1:
            boxes, cats = [boxes], [cats] if np.ndim(cats) == 0 else cats
    elif isinstance(value, list | tuple) and all(isinstance(o, dict) for o in value):
        boxes = [o.get("bbox", o.get("box")) for o in value]
        cats = [next((o[k] for k in ("category", "category_id", "label") if k in o), None)
                for o in value]
    else:
        boxes, cats = None, None
    if boxes is None or cats is None or len(boxes) != len(cats):
        raise EvalDataError("eval.dataset.columns.boxes: a cell is not a list of objects {bbox, "
                            "category} nor {'bbox': [[x, y, w, h], ...], 'category': [...]}; map "
                            "the boxes role to such a column (e.g. the objects column)")
    xywh = np.asarray(boxes, np.float64).reshape(-1, 4)
    xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
    return {"boxes": xyxy, "labels": np.array([category(c) for c in cats], np.int64)}


class Detect(Evaluator):
    """Object detection; `extra` per row: its feeds' indices, the real text queries of each
    feed (zero-shot), the image's size (h, w) and its queries."""

    tasks = ("object-detection",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        feeds, extra = [], []
        for row in rows:
            img = image_array(row["image"])
            extra.append(([len(feeds)], [], img.shape[:2], []))
            feeds.append(image_feed(cx, img))
        return Prepared(feeds, rows, extra)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        style = style_of(cx)
        out = []
        for index, counts, size, _ in prepared.extra:
            logits = [first(outputs[i]["logits"]) for i in index]
            if counts:  # zero-shot: each feed scored some of the queries
                logits = [x[..., :n] for x, n in zip(logits, counts, strict=True)]
            out.append(postprocess(np.concatenate(logits, axis=-1),
                                   first(outputs[index[0]]["pred_boxes"]), tuple(size), style))
        return out

    def category(self, queries: list[str], cx: Context) -> Any:
        """What maps a category cell to a class id: an integer as it is, a name through the
        model's id2label (case-insensitive)."""
        by_name = {v.lower(): k for k, v in cx.id2label().items()}

        def class_id(value: Any) -> int:
            if isinstance(value, int | np.integer):
                return int(value)
            if str(value).strip().lower() in by_name:
                return by_name[str(value).strip().lower()]
            raise EvalDataError(f"eval.dataset.columns.boxes: category {value!r} is not one of "
                                f"the model's labels ({', '.join(list(by_name)[:6])}...); use "
                                "class ids or the model's label names")
        return class_id

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        out = [truth_objects(row.get("boxes"), self.category(queries, cx))
               for row, (_, _, _, queries) in zip(prepared.rows, prepared.extra, strict=True)]
        if not any(len(t["labels"]) for t in out):
            raise EvalDataError("eval.dataset.columns.boxes: no evaluated row has an object; "
                                "map the boxes role to the objects column, or take more samples")
        return out

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        if not cx.labelled:  # PyTorch's detections are the truth (see the module docstring)
            predictions, truth = [confident(p) for p in predictions], [confident(t) for t in truth]
        return coco_map(predictions, truth)


class ZeroShotDetect(Detect):
    """Zero-shot detection: each image with its row's text queries (or the shipped ones), in
    groups of the graph's text batch (see executors/evaluation/zeroshot.py); categories index
    the queries or name them."""

    tasks = ("zero-shot-object-detection",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        feeds, extra = [], []
        for row in rows:
            img = image_array(row["image"])
            queries = row_queries(row.get("text"))
            got, counts = query_feeds(cx, queries, image_feed(cx, img))
            extra.append((list(range(len(feeds), len(feeds) + len(got))), counts, img.shape[:2],
                          queries))
            feeds += got
        return Prepared(feeds, rows, extra)

    def category(self, queries: list[str], cx: Context) -> Any:
        return lambda value: query_index(queries, value)
