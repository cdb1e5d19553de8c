"""Classification of a whole input (text, text pair, image, audio): top-1 accuracy (and top-5
where there are more than five classes), macro F1 — scikit-learn computes them."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Prepared, first
from executors.evaluation.inputs import modality_feed

TOP = 5


class Classify(Evaluator):
    tasks = ("text-classification", "zero-shot-classification", "image-classification",
             "audio-classification")

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        return Prepared([modality_feed(cx, r) for r in rows], rows)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        name = "logits" if "logits" in outputs[0] else next(iter(outputs[0]))
        return [first(o[name]).reshape(-1) for o in outputs]  # the scores; ranked in score()

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        names = cx.label_names.get("label")
        by_name = {v.lower(): k for k, v in cx.id2label().items()}
        if names and all(n.lower() in by_name for n in names):  # the dataset's own id order
            return [by_name[names[int(r["label"])].lower()] for r in prepared.rows]
        if names and all(n.isdigit() for n in names):  # class folders named by class id
            return [int(names[int(r["label"])]) for r in prepared.rows]
        return [class_id(r["label"], cx) for r in prepared.rows]

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        from sklearn.metrics import accuracy_score, f1_score

        scores = np.stack(predictions)
        top1 = scores.argmax(-1)
        want = np.array([int(np.argmax(t)) if isinstance(t, np.ndarray) else int(t)
                         for t in truth])
        out = {"accuracy": float(accuracy_score(want, top1)),
               "f1_macro": float(f1_score(want, top1, average="macro", zero_division=0))}
        if scores.shape[1] > TOP:
            ranked = np.argsort(-scores, axis=-1)[:, :TOP]
            out["top5_accuracy"] = float(np.mean([w in r for w, r in zip(want, ranked,
                                                                          strict=True)]))
        return out


def class_id(label: Any, cx: Context) -> int:
    """A label cell as the model's class id: an integer as it is, a name through the model's
    label2id (case-insensitive); either must be one of the model's classes."""
    classes = cx.id2label()
    by_name = {v.lower(): k for k, v in classes.items()}
    if isinstance(label, bool | np.bool_ | int | np.integer):
        value = int(label)
    else:
        text = str(label).strip()
        if text.lower() in by_name:
            return by_name[text.lower()]
        if not text.lstrip("-").isdigit():
            raise EvalDataError(f"eval.dataset: label {text!r} is not one of the model's labels "
                                f"({', '.join(list(by_name)[:8])}...); map "
                                "eval.dataset.columns.label to a column of class ids or of the "
                                "model's label names")
        value = int(text)
    if classes and value not in classes:
        raise EvalDataError(f"eval.dataset: a label is class {value}, and the model has "
                            f"{len(classes)} classes ({min(classes)} .. {max(classes)}); map "
                            "eval.dataset.columns.label to a column of the model's class ids or "
                            "names")
    return value
