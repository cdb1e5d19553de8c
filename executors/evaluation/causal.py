"""Text generation (causal LMs) scored as language modelling on the dataset's texts: each text's
tokens are read through the prefill graph (its first prefill_length tokens) and the decode
graph (one token at a time after that, filling the static cache), and every position's logits
predict the next token. Next-token accuracy (argmax = the text's next token) and perplexity
(exp of the mean negative log-likelihood) are the same numbers for PyTorch (through the same
traced wrappers), the fp32 graphs and the deliverable, so the drop is the deliverable's. Texts
longer than the cache are cut to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from executors.evaluation.base import Context, EvalDataError, Evaluator, Forward, Prepared
from executors.evaluation.textscore import tokenizer
from executors.runtime.generate import LMRunner


def _token_lists(rows: list[dict[str, Any]], cx: Context, longest: int) -> list[list[int]]:
    tok = tokenizer(cx.checkpoint)
    if tok is None:
        raise EvalDataError("eval: text generation reads texts through the model's tokenizer, "
                            "and the checkpoint has none; add its tokenizer files, or set "
                            "eval=none (verify_generation compares with PyTorch without one)")
    out = []
    for i, row in enumerate(rows):
        if row.get("text") is None:
            raise EvalDataError(f"eval.dataset.columns.text: row {i} has no text; map "
                                "eval.dataset.columns.text to the column of texts")
        ids = list(tok(str(row["text"]))["input_ids"])[:longest]
        if len(ids) < 2:
            raise EvalDataError(f"eval.dataset: row {i} has fewer than 2 tokens; nothing to "
                                "predict (drop short rows)")
        out.append(ids)
    return out


class Causal(Evaluator):
    tasks = ("text-generation",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        if any(s["name"] == "inputs_embeds" for s in cx.specs["decode"]) or \
                "hidden_states" in cx.outputs["decode"]:
            raise EvalDataError("eval: a language model whose embeddings or head run on the "
                                "host (export.on_host) is not evaluated yet; verify_generation "
                                "compares it with PyTorch; set eval=none or export.on_host=[]")
        context = int(next(s for s in cx.specs["decode"]
                           if s["name"] == "attention_mask")["shape"][1]) - 1
        ids = _token_lists(rows, cx, context + 1)
        return Prepared([{} for _ in rows], rows, ids)

    def predictions(self, graphs: dict[str, Forward], prepared: Prepared, cx: Context,
                    progress: Callable[[int], None]) -> list[Any]:
        runner = LMRunner(graphs["prefill"], graphs["decode"], cx.specs["prefill"],
                          cx.specs["decode"])
        out = []
        for i, ids in enumerate(prepared.extra):
            logits = runner.prompt(ids[:-1]).astype(np.float64)  # row j predicts ids[j + 1]
            shifted = logits - logits.max(-1, keepdims=True)
            logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
            nexts = np.asarray(ids[1:])
            out.append({"argmax": logits.argmax(-1).tolist(),
                        "nll": float(-logp[np.arange(len(nexts)), nexts].sum())})
            progress(i)
        return out

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return [ids[1:] for ids in prepared.extra]

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        tokens = sum(len(t) for t in truth)
        right = sum(int(np.sum(np.asarray(p["argmax"]) == np.asarray(t)))
                    for p, t in zip(predictions, truth, strict=True))
        nll = sum(p["nll"] for p in predictions)
        return {"next_token_accuracy": right / max(tokens, 1),
                "perplexity": float(np.exp(nll / max(tokens, 1)))}
