"""Token classification (NER, chunking, POS): each word's tag from its first sub-token, scored
by seqeval — entity-level micro F1, precision and recall, and per-word accuracy.

Tags are the model's names (config.json id2label). A dataset's tag ids are the model's ids,
unless the column is a ClassLabel: then its ids are the dataset's and are mapped by name."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Prepared, first
from executors.evaluation.inputs import seq_len, text_feed, tokenizer

_PREFIXED = re.compile(r"^[BIES]-")
_FIX = "map eval.dataset.columns.label to a column of per-word tag ids or tag names"


def first_subtokens(word_ids: list[int | None], words: int) -> list[int | None]:
    """Each word's first sub-token position: None for a word that has no sub-token (an empty
    word) or that truncation cut off."""
    out: list[int | None] = [None] * words
    for pos, word in enumerate(word_ids):
        if word is not None and word < words and out[word] is None:
            out[word] = pos
    return out


def iob(tag: str) -> str:
    """A tag as seqeval reads it: O and B-/I-/E-/S- tags as they are, a bare tag (IO scheme,
    LABEL_3) as I-tag so that a run of it is one entity (seqeval would cut its first letter
    off as a prefix)."""
    return tag if tag == "O" or _PREFIXED.match(tag) else f"I-{tag}"


def words_of(value: Any, row: int) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list | tuple | np.ndarray):
        raise EvalDataError(f"eval.dataset.columns.tokens: row {row} holds "
                            f"{type(value).__name__}, not a list of words; map tokens to a "
                            "column of word lists (a text split into words)")
    return [str(w) for w in value]


class TokenTags(Evaluator):
    tasks = ("token-classification",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        tok = tokenizer(cx)
        if not getattr(tok, "is_fast", False):
            raise EvalDataError("eval: token-classification aligns words to sub-tokens with a "
                                "fast tokenizer and the checkpoint has none; add its "
                                "tokenizer.json to the checkpoint folder")
        feeds, firsts = [], []
        for i, row in enumerate(rows):
            words = words_of(row.get("tokens"), i)
            enc = tok(words, is_split_into_words=True, padding="max_length", truncation=True,
                      max_length=seq_len(cx), return_tensors="np")
            feeds.append(text_feed(cx, enc))
            firsts.append(first_subtokens(enc.word_ids(0), len(words)))
        return Prepared(feeds, rows, firsts)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        """Per row, the tags of the words the graph saw (a word cut off has none)."""
        names = cx.id2label()
        out_name = "logits" if "logits" in outputs[0] else next(iter(outputs[0]))
        tags = []
        for out, firsts in zip(outputs, prepared.extra, strict=True):
            ids = first(out[out_name]).argmax(-1)
            tags.append([names.get(int(ids[p]), f"LABEL_{int(ids[p])}") for p in firsts
                         if p is not None])
        return tags

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        tag = tag_namer(cx)
        out = []
        for i, (row, firsts) in enumerate(zip(prepared.rows, prepared.extra, strict=True)):
            labels = row.get("label")
            if not isinstance(labels, list | tuple | np.ndarray) or len(labels) != len(firsts):
                got = len(labels) if isinstance(labels, list | tuple | np.ndarray) else labels
                raise EvalDataError(f"eval.dataset.columns.label: row {i} has {len(firsts)} "
                                    f"words and labels {got!r} (one tag per word needed); {_FIX}")
            out.append([tag(v, i) for v, p in zip(labels, firsts, strict=True) if p is not None])
        return out

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

        got = [[iob(t) for t in row] for row in predictions]
        want = [[iob(t) for t in row] for row in truth]
        if not any(want):
            raise EvalDataError("eval.dataset.columns.tokens: no row has a word the graph "
                                "sees; map tokens to a column of non-empty word lists")
        out = {"accuracy": float(accuracy_score(want, got))}
        if not any(t != "O" for row in want + got for t in row):
            return {"f1": 1.0, "precision": 1.0, "recall": 1.0, **out}  # no entity on either side
        entity = {"f1": f1_score, "precision": precision_score, "recall": recall_score}
        return {k: float(f(want, got, zero_division=0)) for k, f in entity.items()} | out


def tag_namer(cx: Context) -> Callable[[Any, int], str]:
    """dataset label cell -> the model's tag name: an id through the dataset's ClassLabel names
    when it has them, else the model's id2label; a name matched case-insensitively."""
    model = cx.id2label()
    by_name = {v.lower(): v for v in model.values()}
    names = dict(enumerate(cx.label_names.get("label") or [])) or model
    whose = "dataset's ClassLabel" if cx.label_names.get("label") else "model's"

    def tag(value: Any, row: int) -> str:
        if isinstance(value, int | np.integer) or (isinstance(value, str) and value.isdigit()):
            if names and int(value) not in names:
                raise EvalDataError(f"eval.dataset.columns.label: tag id {value} (row {row}) is "
                                    f"not one of the {whose} {len(names)} tags; {_FIX}")
            value = names.get(int(value), f"LABEL_{int(value)}")
        name = str(value)
        if model and name.lower() not in by_name:
            raise EvalDataError(f"eval.dataset.columns.label: tag {name!r} (row {row}) is not "
                                f"one of the model's tags ({', '.join(model.values())}); {_FIX}")
        return by_name.get(name.lower(), name)

    return tag
