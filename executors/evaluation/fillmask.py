"""Masked language modelling: about MASK_RATE of each text's non-special tokens (at least one)
are replaced by the mask token, the same positions every time (seeded by the row's index);
accuracy = the top-1 prediction is the original token, top5_accuracy = it is among the top 5.
The text is its own label: this task is always scored against the original tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Prepared, first
from executors.evaluation.inputs import encode, text_feed, tokenizer

MASK_RATE = 0.15   # BERT's pre-training rate
TOP = 5


def mask_positions(candidates: np.ndarray, seed: int, rate: float = MASK_RATE) -> np.ndarray:
    """About `rate` of the candidate positions, at least one (none of none), sorted; the same
    for the same seed."""
    if candidates.size == 0:
        return candidates.astype(np.int64)
    count = max(1, round(rate * candidates.size))
    chosen = np.random.default_rng(seed).choice(candidates, size=count, replace=False)
    return np.sort(chosen).astype(np.int64)


class FillMask(Evaluator):
    tasks = ("fill-mask",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        """`extra` holds each row's masked positions and the tokens they held."""
        tok = tokenizer(cx)
        if tok.mask_token_id is None:
            raise EvalDataError("eval: the checkpoint's tokenizer has no mask token; fill-mask "
                                "needs one (mask_token in tokenizer_config.json)")
        feeds, extra = [], []
        for i, row in enumerate(rows):
            enc = dict(encode(cx, str(row.get("text") or "")))
            ids = np.array(enc["input_ids"], np.int64).reshape(-1)
            special = np.array(tok.get_special_tokens_mask(
                ids.tolist(), already_has_special_tokens=True), bool)
            real = np.asarray(enc.get("attention_mask", np.ones_like(ids))).reshape(-1) > 0
            where = mask_positions(np.flatnonzero(real & ~special), seed=i)
            original = ids[where].copy()
            ids[where] = tok.mask_token_id
            feeds.append(text_feed(cx, {**enc, "input_ids": ids[None]}))
            extra.append((where, original))
        return Prepared(feeds, rows, extra)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        """Per row, the top-5 token ids at each masked position, best first."""
        name = "logits" if "logits" in outputs[0] else next(iter(outputs[0]))
        ranked = []
        for out, (where, _) in zip(outputs, prepared.extra, strict=True):
            logits = first(out[name])[where]
            ranked.append(np.argsort(-logits, axis=-1, kind="stable")[:, :TOP])
        return ranked

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return [original for _, original in prepared.extra]

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        want = np.concatenate([np.asarray(t, np.int64).reshape(-1) for t in truth])
        if want.size == 0:
            raise EvalDataError("eval.dataset.columns.text: no row has a token to mask; map "
                                "text to a column of non-empty texts")
        ranked = np.concatenate([np.asarray(p) for p in predictions])
        return {"accuracy": float(np.mean(ranked[:, 0] == want)),
                "top5_accuracy": float(np.mean((ranked == want[:, None]).any(-1)))}
