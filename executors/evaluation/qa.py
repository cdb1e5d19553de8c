"""Extractive question answering: the answer is the context span with the highest start + end
logit (start <= end, inside the context, at most MAX_ANSWER tokens), scored as SQuAD scores it:
exact match and token F1 of the normalized texts, the best over the gold answers.

One window per row: a context longer than the graph is cut (no doc stride), the same for all
three models. A dataset with unanswerable questions (an empty gold list, SQuAD v2) is scored
as SQuAD v2 is: the empty answer is predicted when the null score (the [CLS] token's start +
end logit) beats the best span's, and it is right exactly when there is no gold answer."""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Prepared, first
from executors.evaluation.inputs import seq_len, text_feed, tokenizer

MAX_ANSWER = 30          # tokens; SQuAD evaluation scripts use 30
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalization (lower case, no punctuation, no articles, single spaces),
    after the official v2.0 evaluation script: no offline-installable package ships it (the
    `evaluate` library downloads its squad metric script at run time)."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def golds_of(answers: Any) -> list[str]:
    """The gold answer texts of a cell: SQuAD's {"text": [...], ...}, a string, a list of
    strings or of SQuAD answer dicts; those that normalize to nothing are dropped, and none
    left means unanswerable ([""], as the official script scores it)."""
    if isinstance(answers, dict):
        answers = answers.get("text")
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list | tuple | np.ndarray):
        raise EvalDataError(f"eval.dataset.columns.answers: {type(answers).__name__} is not an "
                            "answer; map answers to a column of SQuAD answers "
                            '({"text": [...], "answer_start": [...]}) or of answer strings')
    texts = [str(a["text"] if isinstance(a, dict) else a) for a in answers]
    return [t for t in texts if normalize_answer(t)] or [""]


def exact_match(prediction: str, golds: list[str]) -> float:
    return float(any(normalize_answer(prediction) == normalize_answer(g) for g in golds))


def token_f1(prediction: str, golds: list[str]) -> float:
    """SQuAD's token F1, the best over the gold answers (empty against empty is 1)."""
    def f1(gold: str) -> float:
        got, want = normalize_answer(prediction).split(), normalize_answer(gold).split()
        if not got or not want:
            return float(got == want)
        common = sum((Counter(got) & Counter(want)).values())
        if common == 0:
            return 0.0
        precision, recall = common / len(got), common / len(want)
        return 2 * precision * recall / (precision + recall)

    return max(f1(g) for g in golds)


def best_span(start: np.ndarray, end: np.ndarray, allowed: np.ndarray,
              max_len: int = MAX_ANSWER) -> tuple[int, int] | None:
    """The (start, end) token positions with the highest start + end logit, both allowed,
    start <= end < start + max_len; None when no position is allowed."""
    where = np.flatnonzero(allowed)
    if where.size == 0:
        return None
    pair = start[where][:, None].astype(np.float64) + end[where][None, :]
    gap = where[None, :] - where[:, None]
    pair = np.where((gap >= 0) & (gap < max_len), pair, -np.inf)
    i, j = np.unravel_index(int(np.argmax(pair)), pair.shape)
    return int(where[i]), int(where[j])


def _text(row: dict[str, Any], role: str, i: int) -> str:
    value = row.get(role)
    if not isinstance(value, str) or not value.strip():
        raise EvalDataError(f"eval.dataset.columns.{role}: row {i} has no {role} text "
                            f"({value!r}); map {role} to a column of non-empty strings")
    return value


class QuestionAnswering(Evaluator):
    tasks = ("question-answering",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        """Question and context in the tokenizer's order, only the context cut to the graph's
        length; `extra` holds each row's context, its tokens' character spans (None outside
        the context) and the [CLS] position."""
        tok, length = tokenizer(cx), seq_len(cx)
        if not getattr(tok, "is_fast", False):
            raise EvalDataError("eval: question-answering maps answer tokens to the context's "
                                "characters with a fast tokenizer and the checkpoint has none; "
                                "add its tokenizer.json to the checkpoint folder")
        first_question = tok.padding_side == "right"  # as transformers' QA pipeline orders them
        feeds, extra = [], []
        for i, row in enumerate(rows):
            question, context = _text(row, "question", i), _text(row, "context", i)
            pair = (question, context) if first_question else (context, question)
            try:
                enc = tok(*pair, padding="max_length", max_length=length,
                          truncation="only_second" if first_question else "only_first",
                          return_offsets_mapping=True, return_tensors="np")
            except Exception as exc:  # the tokenizers library raises a bare Exception here
                raise EvalDataError(f"eval.dataset.columns.question: row {i}'s question leaves "
                                    f"no room for the context in the graph's {length} tokens "
                                    f"({exc}); raise export.shapes.sequence_length") from exc
            part = 1 if first_question else 0
            spans = [tuple(int(x) for x in o) if s == part else None
                     for s, o in zip(enc.sequence_ids(0), enc["offset_mapping"][0], strict=True)]
            ids = enc["input_ids"][0].tolist()
            cls = ids.index(tok.cls_token_id) if tok.cls_token_id in ids else 0
            feeds.append(text_feed(cx, enc))
            extra.append((context, spans, cls))
        return Prepared(feeds, rows, extra)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        """Per row, the answer text; with unanswerable questions in the dataset (SQuAD v2),
        the empty answer where the null score beats the best span's."""
        v2 = any("answers" in r and golds_of(r["answers"]) == [""] for r in prepared.rows)
        answers = []
        for out, (context, spans, cls) in zip(outputs, prepared.extra, strict=True):
            start, end = first(out["start_logits"]), first(out["end_logits"])
            span = best_span(start, end, np.array([s is not None for s in spans]))
            if span is None or (v2 and start[cls] + end[cls] > start[span[0]] + end[span[1]]):
                answers.append("")
                continue
            answers.append(context[spans[span[0]][0]:spans[span[1]][1]])
        return answers

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return [golds_of(r.get("answers")) for r in prepared.rows]

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        golds = [[t] if isinstance(t, str) else t for t in truth]  # PyTorch's answers as truth
        pairs = list(zip(predictions, golds, strict=True))
        return {"f1": float(np.mean([token_f1(p, g) for p, g in pairs])),
                "exact_match": float(np.mean([exact_match(p, g) for p, g in pairs]))}
