"""Zero-shot image classification (CLIP-like): top-1 accuracy of `logits_per_image` over one
text prompt per class, "a photo of a {name}", against the `label` column (labels index the
classes). The class names are the dataset's ClassLabel names, else the model's id2label (when it
names its classes), else the distinct label strings of the evaluated rows; without labels and
without names, the shipped text queries are the classes (agreement with PyTorch's top-1).

The exported graph takes a fixed number of texts per image (export.shapes.text_queries, 1 by
default): the prompts go through it in groups of that size with the same image, the last group
filled up with its last prompt, and each image's logits are the groups' put back together
(CLIP scores each text independently of the others, so this is exact). Every group runs the
image tower again: export with text_queries = the number of classes to run it once.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Feed, Prepared, first
from executors.evaluation.inputs import image_feed, tokenizer
from executors.onnx.iospecs import kind_of
from executors.samples.text import QUERIES

PROMPT = "a photo of a {}"
_PLACEHOLDER = re.compile(r"^LABEL_\d+$")


def query_feeds(cx: Context, prompts: list[str], pixels: Feed) -> tuple[list[Feed], list[int]]:
    """The feeds of one image with `prompts` in groups of the graph's text batch, and how many
    prompts of each group are real (the rest repeat the group's last one)."""
    ids = next((s for s in cx.inputs if kind_of(s) == "token_ids"), None)
    if ids is None:
        raise EvalDataError("eval: the graph takes no text (input_ids); zero-shot tasks need a "
                            "graph exported with its text tower")
    batch, seq = int(ids["shape"][0]), int(ids["shape"][1])
    enc = tokenizer(cx)(prompts, padding="max_length", truncation=True, max_length=seq,
                        return_tensors="np")
    tokens = {"token_ids": np.asarray(enc["input_ids"], np.int64),
              "attention_mask": np.asarray(enc.get("attention_mask",
                                                   np.ones_like(enc["input_ids"])), np.int64)}
    feeds, counts = [], []
    for start in range(0, len(prompts), batch):
        take = list(range(start, min(start + batch, len(prompts))))
        take += [take[-1]] * (batch - len(take))
        feed = dict(pixels)
        for spec in cx.inputs:
            if kind_of(spec) in tokens:
                feed[spec["name"]] = tokens[kind_of(spec)][take]
        feeds.append(feed)
        counts.append(min(batch, len(prompts) - start))
    return feeds, counts


def row_queries(value: Any) -> list[str]:
    """A row's text queries: a list of strings, or one string of comma-separated queries; the
    shipped queries when the row has none."""
    if value is None:
        return list(QUERIES)
    queries = [str(q).strip() for q in (value.split(",") if isinstance(value, str) else value)]
    if not all(queries):
        raise EvalDataError("eval.dataset.columns.text: an empty text query; map the text role "
                            "to a column of query lists (or comma-separated queries)")
    return queries


def query_index(queries: list[str], value: Any) -> int:
    """A label or category cell as an index into `queries`: an integer as it is, a name as the
    query it is (or the query "a photo of a NAME")."""
    if isinstance(value, int | np.integer):
        return int(value)
    text = str(value).strip().lower()
    lowered = [q.lower() for q in queries]
    for wanted in (text, PROMPT.format(text)):
        if wanted in lowered:
            return lowered.index(wanted)
    raise EvalDataError(f"eval.dataset.columns: the label {value!r} is none of the text queries "
                        f"({', '.join(queries[:6])}); label with query indices or query names")


def class_names(rows: list[dict[str, Any]], cx: Context) -> list[str] | None:
    """The classes' names (see the module docstring); None without any."""
    if cx.label_names.get("label"):
        return list(cx.label_names["label"])
    labels = [r.get("label") for r in rows] if cx.labelled else []
    named = cx.id2label()
    real = named and not all(_PLACEHOLDER.match(v) for v in named.values())
    if real and all(isinstance(v, int | np.integer) or str(v).lower() in
                    {n.lower() for n in named.values()} for v in labels):
        return [named[i] for i in sorted(named)]
    if labels and all(isinstance(v, str) for v in labels):
        return sorted({v.strip() for v in labels})
    return None


class ZeroShotClassify(Evaluator):
    tasks = ("zero-shot-image-classification",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        """Feeds flattened over the rows; `extra` per row: its feeds' indices and real counts,
        and the class names (None: the shipped queries)."""
        names = class_names(rows, cx)
        if names is None and cx.labelled:
            raise EvalDataError("eval.dataset.columns.label: integer labels and no class names "
                                "(no ClassLabel names, no id2label in the model); map the label "
                                "role to a column of class names")
        prompts = [PROMPT.format(n) for n in names] if names is not None else list(QUERIES)
        feeds: list[Feed] = []
        extra = []
        for row in rows:
            got, counts = query_feeds(cx, prompts, image_feed(cx, row["image"]))
            extra.append((list(range(len(feeds), len(feeds) + len(got))), counts, names))
            feeds += got
        return Prepared(feeds, rows, extra)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        name = "logits_per_image" if "logits_per_image" in outputs[0] else next(iter(outputs[0]))
        return [np.concatenate([first(outputs[i][name]).reshape(-1)[:n]
                                for i, n in zip(index, counts, strict=True)])
                for index, counts, _ in prepared.extra]

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return [query_index(names, r["label"])
                for (_, _, names), r in zip(prepared.extra, prepared.rows, strict=True)]

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        want = np.array([int(np.argmax(t)) if isinstance(t, np.ndarray) else int(t)
                         for t in truth])
        got = np.array([int(np.argmax(p)) for p in predictions])
        return {"accuracy": float(np.mean(got == want))}
