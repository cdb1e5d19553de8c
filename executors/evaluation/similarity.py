"""Embeddings (feature extraction, sentence similarity, image features): Spearman correlation
(scipy) of the pairs' cosine similarities with a score column (STS), else with PyTorch's own
pair similarities; retrieval agreement = how often an input's nearest neighbour among the
evaluated inputs is the one PyTorch's embeddings find."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors.evaluation.base import Context, Evaluator, Feed, Prepared, first
from executors.evaluation.inputs import encode, modality_feed, text_feed


def embedding(out: dict[str, np.ndarray], feed: Feed) -> np.ndarray:
    """One vector per input: a pooled output when the graph has one, else the mean of the
    token states over the attention mask (or over every position)."""
    for name in ("sentence_embedding", "pooler_output", "text_embeds", "image_embeds",
                 "embeddings"):
        if name in out:
            return first(out[name]).reshape(-1).astype(np.float64)
    states = first(next(iter(out.values()))).astype(np.float64)
    if states.ndim == 1:
        return states
    mask = next((v for k, v in feed.items() if "attention_mask" in k), None)
    if mask is not None and mask.shape[-1] == states.shape[0]:
        weights = mask[0].astype(np.float64)[:, None]
        return (states * weights).sum(0) / max(weights.sum(), 1e-9)
    return states.reshape(states.shape[0], -1).mean(0) if states.ndim > 1 else states


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-12)


class Similarity(Evaluator):
    tasks = ("feature-extraction", "sentence-similarity", "image-feature-extraction")

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        """Each row gives one input, or two (text and text_pair): feeds are flattened, and
        `extra` holds each row's feed indices."""
        feeds, extra = [], []
        for r in rows:
            if "text_pair" in r and r["text_pair"] is not None:
                extra.append((len(feeds), len(feeds) + 1))
                feeds += [text_feed(cx, encode(cx, str(r["text"]))),
                          text_feed(cx, encode(cx, str(r["text_pair"])))]
            else:
                extra.append((len(feeds),))
                feeds.append(modality_feed(cx, r))
        return Prepared(feeds, rows, extra)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        vectors = [_unit(embedding(o, f)) for o, f in zip(outputs, prepared.feeds, strict=True)]
        return [tuple(vectors[i] for i in idx) for idx in prepared.extra]

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return [float(r["score"]) for r in prepared.rows]

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        from scipy.stats import spearmanr

        pairs = all(len(p) == 2 for p in predictions)
        flat = [v for p in predictions for v in p]
        reference = truth if truth and not isinstance(truth[0], float) else cx.baseline
        want_flat = [v for p in reference for v in p] if reference else flat
        out = {"retrieval_agreement": _retrieval(flat, want_flat)}
        if pairs:
            sims = [float(a @ b) for a, b in predictions]
            want = truth if isinstance(truth[0], float) else [float(a @ b) for a, b in truth]
        else:  # single inputs: every pair's similarity against the reference's
            sims, want = _pairwise(flat), _pairwise(want_flat)
        rho = spearmanr(sims, want).statistic if len(sims) > 1 else 1.0
        out["spearman"] = 1.0 if np.isnan(rho) and np.allclose(sims, want) else float(
            np.nan_to_num(rho))
        return out


def _pairwise(vectors: list[np.ndarray]) -> list[float]:
    m = np.stack(vectors) @ np.stack(vectors).T
    return m[np.triu_indices(len(vectors), 1)].tolist()


def _retrieval(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """Share of inputs whose nearest other input is the same under both embeddings."""
    if len(got) < 3:
        return 1.0
    g, w = np.stack(got) @ np.stack(got).T, np.stack(want) @ np.stack(want).T
    np.fill_diagonal(g, -np.inf)
    np.fill_diagonal(w, -np.inf)
    return float(np.mean(g.argmax(1) == w.argmax(1)))
