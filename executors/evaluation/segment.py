"""Semantic segmentation: the logits [1, C, h, w] upsampled (bilinear, as transformers'
post-processing does) to the label mask's size, or to the image's without labels, and the
argmax per pixel; mean IoU over the classes present in the truth or the prediction, and pixel
accuracy, from one confusion matrix over every evaluated pixel (label 255 is ignored). Without
labels the truth is PyTorch's predicted mask."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Prepared, first
from executors.evaluation.data import opened
from executors.evaluation.inputs import dense_rows

IGNORE = 255
CHUNK = 1 << 24      # upsampled logits held at once (floats): classes are upsampled in groups


def upsampled_argmax(logits: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The class per pixel of `logits` [C, h, w] upsampled to `size` (bilinear, corners not
    aligned); classes go through in groups so a large mask never holds all C maps."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(logits, np.float32))[None]
    step = max(1, CHUNK // max(1, size[0] * size[1]))
    best = arg = None
    for start in range(0, x.shape[1], step):
        up = F.interpolate(x[:, start:start + step], size=size, mode="bilinear",
                           align_corners=False)[0]
        value, index = up.max(0)
        if best is None or arg is None:
            best, arg = value, index
            continue
        better = value > best
        best, arg = torch.where(better, value, best), torch.where(better, index + start, arg)
    assert arg is not None
    return arg.numpy().astype(np.int32)


def confusion(pred: np.ndarray, truth: np.ndarray, classes: int) -> np.ndarray:
    """[truth, prediction] pixel counts over the pixels whose truth is a class (not IGNORE,
    not negative)."""
    keep = (truth != IGNORE) & (truth >= 0)
    t, p = truth[keep].astype(np.int64), pred[keep].astype(np.int64)
    return np.bincount(t * classes + p, minlength=classes * classes).reshape(classes, classes)


def segmentation_scores(predictions: list[np.ndarray], truth: list[np.ndarray]) -> dict[str, float]:
    """mIoU over the classes present (in truth or prediction) and pixel accuracy."""
    used = [t[(t != IGNORE) & (t >= 0)] for t in truth]
    classes = 1 + max([int(p.max(initial=0)) for p in predictions] +
                      [int(u.max(initial=0)) for u in used])
    matrix = sum((confusion(p, t, classes) for p, t in zip(predictions, truth, strict=True)),
                 np.zeros((classes, classes), np.int64))
    hits = np.diag(matrix).astype(np.float64)
    union = matrix.sum(0) + matrix.sum(1) - hits
    present = union > 0
    total = matrix.sum()
    if total == 0:
        raise EvalDataError("eval.dataset.columns.mask: every evaluated pixel is 255 (ignored); "
                            "map the mask role to a column of class ids")
    return {"miou": float(np.mean(hits[present] / union[present])),
            "pixel_accuracy": float(hits.sum() / total)}


def label_mask(value: Any, reduce_labels: bool = False) -> np.ndarray:
    """A mask cell (an image of class ids, a path, {'bytes'|'path'}, an array) as int [H, W];
    `reduce_labels` applies the image processor's do_reduce_labels (0 = background -> 255,
    every other class id minus 1)."""
    mask = np.asarray(opened(value))  # a palette or grey image gives its indices as they are
    if mask.ndim == 3:
        if not (mask[..., :1] == mask[..., :3]).all():
            raise EvalDataError("eval.dataset.columns.mask: the mask is a colour image; map the "
                                "mask role to a column of class-id images (grey or palette)")
        mask = mask[..., 0]
    if mask.ndim != 2:
        raise EvalDataError(f"eval.dataset.columns.mask: a mask of shape {list(mask.shape)}; "
                            "map the mask role to a column of [H, W] class-id images")
    mask = mask.astype(np.int64)
    if reduce_labels:
        mask = np.where(mask == 0, IGNORE + 1, mask) - 1
        mask[mask == IGNORE - 1] = IGNORE
    return mask


def reduces_labels(checkpoint: Path | None) -> bool:
    """The checkpoint's image processor reduces labels (ADE20k-style: 0 is background)."""
    path = checkpoint / "preprocessor_config.json" if checkpoint is not None else None
    if path is None or not path.is_file():
        return False
    config = json.loads(path.read_text())
    return bool(config.get("do_reduce_labels", config.get("reduce_labels", False)))


class Segment(Evaluator):
    tasks = ("image-segmentation",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        reduce = reduces_labels(cx.checkpoint)
        return dense_rows(rows, cx, "mask", lambda v: label_mask(v, reduce))

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        name = "logits" if "logits" in outputs[0] else next(iter(outputs[0]))
        return [upsampled_argmax(first(o[name]), tuple(size))
                for o, (_, size) in zip(outputs, prepared.extra, strict=True)]

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return [mask for mask, _ in prepared.extra]

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        return segmentation_scores(predictions, truth)
