"""Depth estimation: `predicted_depth` upsampled (bilinear: no overshoot below zero) to the
truth's size, or to the image's without labels; AbsRel = mean(|pred - gt| / gt) and
delta1 = the share of pixels with max(pred / gt, gt / pred) < 1.25, over the pixels with
gt > 0, per image and then averaged over the images.

Each prediction is median-scaled to its truth first (pred * median(gt) / median(pred) over the
valid pixels), as relative-depth models are evaluated: the truth's unit does not matter (a
16-bit PNG in millimetres is as good as metres). A model that predicts inverse depth
(disparity, the MiDaS/DPT family) is compared as it is: compare the three ways with each other,
not with published AbsRel. Without labels the truth is PyTorch's depth."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Prepared, first
from executors.evaluation.data import opened
from executors.evaluation.inputs import dense_rows

DELTA = 1.25


def upsampled(depth: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A depth map [h, w] resized to `size` (bilinear, corners not aligned)."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(depth, np.float32))[None, None]
    if tuple(x.shape[-2:]) == tuple(size):
        return depth.astype(np.float32)
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)[0, 0].numpy()


def median_scaled(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """`pred` times median(gt) / median(pred) (over the valid pixels given); as it is when its
    median is not positive."""
    med = float(np.median(pred))
    return pred * (float(np.median(gt)) / med) if med > 0 else pred


def depth_errors(pred: np.ndarray, gt: np.ndarray) -> tuple[float, float]:
    """(AbsRel, delta1) of one image: over gt > 0, after median scaling."""
    valid = np.isfinite(gt) & (gt > 0)
    if not valid.any():
        raise EvalDataError("eval.dataset.columns.depth: a truth depth map (the depth column's, "
                            "or PyTorch's without one) has no pixel > 0; map the depth role to "
                            "a column of depth maps with measurements (0 = none)")
    g = gt[valid].astype(np.float64)
    p = median_scaled(pred[valid].astype(np.float64), g)
    abs_rel = float(np.mean(np.abs(p - g) / g))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.maximum(p / g, g / p)
    delta1 = float(np.mean(np.nan_to_num(ratio, nan=np.inf) < DELTA))
    return abs_rel, delta1


def depth_scores(predictions: list[np.ndarray], truth: list[np.ndarray]) -> dict[str, float]:
    errors = np.array([depth_errors(p, t) for p, t in zip(predictions, truth, strict=True)])
    return {"abs_rel": float(errors[:, 0].mean()), "delta1": float(errors[:, 1].mean())}


def depth_map(value: Any) -> np.ndarray:
    """A depth cell (an image, a path to an image or .npy, {'bytes'|'path'}, an array or
    nested list) as float64 [H, W]."""
    depth = np.asarray(opened(value), np.float64)
    if depth.ndim == 3 and depth.shape[0] == 1:
        depth = depth[0]
    if depth.ndim == 3 and (depth[..., :1] == depth).all():
        depth = depth[..., 0]
    if depth.ndim != 2:
        raise EvalDataError(f"eval.dataset.columns.depth: a depth map of shape "
                            f"{list(depth.shape)}; map the depth role to a column of [H, W] "
                            "depth images or arrays")
    return depth


class Depth(Evaluator):
    tasks = ("depth-estimation",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        return dense_rows(rows, cx, "depth", depth_map)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        name = "predicted_depth" if "predicted_depth" in outputs[0] else next(iter(outputs[0]))
        out = []
        for o, (_, size) in zip(outputs, prepared.extra, strict=True):
            depth = first(o[name])
            out.append(upsampled(depth.reshape(depth.shape[-2:]), tuple(size)))
        return out

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return [gt for gt, _ in prepared.extra]

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        return depth_scores(predictions, truth)
