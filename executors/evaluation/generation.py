"""Generating models scored on a dataset, through the one generation loop
(executors/generation/):

* Sequence-to-sequence generation (text2text: BART, T5, Marian; image-to-text: a vision encoder
  and a text decoder): each row's input through the encoder, then greedy decoding; PyTorch runs
  the same loop through the same traced modules, so the three models are comparable token for
  token. Scored with BLEU, CER and exact match (executors/evaluation/textscore.py) against the
  `target` column, else against PyTorch's outputs. Speech recognition by an encoder-decoder
  (Whisper) decodes the same way (executors/evaluation/speech.py).
* Text generation (causal LMs) as language modelling on the dataset's texts: each text's tokens
  are read as generation reads a prompt (executors/generation/decoder_only.py: the prefill
  graph a window at a time, filling the static cache), and every position's logits predict
  the next token (a model that keeps no cache: its one graph on the text, padded to its
  length). Next-token accuracy (argmax = the text's next token) and perplexity (exp of
  the mean negative log-likelihood) are the same numbers for PyTorch (through the same traced
  wrappers), the fp32 graphs and the deliverable, so the drop is the deliverable's. Texts
  longer than the cache are cut to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from executors.evaluation import textscore
from executors.evaluation.base import Context, EvalDataError, Evaluator, Forward, Prepared
from executors.evaluation.inputs import modality_feed
from executors.generation import encoder_decoder
from executors.generation.decoder_only import LMGraphs, PrefixGraph
from planner.models.roles import Runs, roles_of, uncached_graph


def decoded_texts(graphs: dict[str, Forward], prepared: Prepared, cx: Context,
                  progress: Callable[[int], None], strip: bool = False) -> list[str]:
    """Each row's greedy decoding by an encoder-decoder, as text (its tokenizer's, else ids)."""
    try:
        how = encoder_decoder.decoding(cx)
    except encoder_decoder.GenerationError as exc:
        raise EvalDataError(str(exc)) from exc
    tok = textscore.tokenizer(cx.checkpoint)
    out = []
    for i, feed in enumerate(prepared.feeds):
        try:
            ids = encoder_decoder.generate(graphs, feed, cx, how).without_end()
        except encoder_decoder.GenerationError as exc:
            raise EvalDataError(str(exc)) from exc
        text = textscore.ids_text(ids) if tok is None else \
            str(tok.decode(ids, skip_special_tokens=True))
        out.append(text.strip() if strip and tok is not None else text)
        progress(i)
    return out


def has_decoder(cx: Context) -> bool:
    """Whether the graphs include an encoder-decoder's decoder (cached or not)."""
    return encoder_decoder.decoder_graph(cx) is not None


class Generation(Evaluator):
    tasks = ("text2text-generation", "image-to-text")

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        role = "image" if cx.task == "image-to-text" else "text"
        for i, row in enumerate(rows):
            if row.get(role) is None:
                raise EvalDataError(f"eval.dataset.columns.{role}: row {i} has no {role}; map "
                                    f"eval.dataset.columns.{role} to the column of inputs")
        return Prepared([modality_feed(cx, {role: r[role]}) for r in rows], rows)

    def predictions(self, graphs: dict[str, Forward], prepared: Prepared, cx: Context,
                    progress: Callable[[int], None]) -> list[Any]:
        return decoded_texts(graphs, prepared, cx, progress)

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return textscore.references(prepared.rows, "target")

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        return {"bleu": textscore.bleu(predictions, truth),
                "cer": textscore.error_rates(predictions, truth)["cer"],
                "exact_match": textscore.exact_match(predictions, truth)}

    def notes(self, cx: Context) -> list[str]:
        return [] if textscore.tokenizer(cx.checkpoint) is not None else \
            [textscore.NO_TOKENIZER]


def _token_lists(rows: list[dict[str, Any]], cx: Context, longest: int) -> list[list[int]]:
    tok = textscore.tokenizer(cx.checkpoint)
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


def _lm_graphs(cx: Context) -> tuple[str, str]:
    """The prompt graph and the token graph of a causal LM (its one graph, twice, where it
    keeps no cache)."""
    whole = uncached_graph(cx.specs)
    if whole:
        return whole, whole
    roles = roles_of(cx.specs)
    return tuple(next(g for g, r in roles.items() if r.runs is runs)  # type: ignore[return-value]
                 for runs in (Runs.PROMPT, Runs.TOKEN))


def _width(cx: Context, graph: str, name: str) -> int:
    """The length of a graph's input `name` (its second axis), as planned."""
    return int(next(s for s in cx.specs[graph] if s["name"] == name)["shape"][1])


def _runner(graphs: dict[str, Forward], cx: Context) -> LMGraphs | PrefixGraph:
    """The graphs as the prompt reader generation uses (an uncached graph fed at its planned
    length: the compiled one's fixed axis, which a free one takes too)."""
    prompt, token = _lm_graphs(cx)
    if prompt == token:
        length = _width(cx, prompt, "input_ids")
        return PrefixGraph(graphs[prompt], length, length)
    return LMGraphs(graphs[prompt], graphs[token], cx.specs[prompt], cx.specs[token])


class Causal(Evaluator):
    tasks = ("text-generation",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        _, token = _lm_graphs(cx)
        if any(s["name"] == "inputs_embeds" for s in cx.specs[token]) or \
                "hidden_states" in cx.outputs[token]:
            raise EvalDataError("eval: a language model whose embeddings or head run on the "
                                "host (export.on_host) is not evaluated yet; verify_generation "
                                "compares it with PyTorch; set eval=none or export.on_host=[]")
        context = _width(cx, token, "attention_mask") - 1 if uncached_graph(cx.specs) is None \
            else _width(cx, token, "input_ids")  # the tokens the graphs read at most
        ids = _token_lists(rows, cx, context + 1)
        return Prepared([{} for _ in rows], rows, ids)

    def predictions(self, graphs: dict[str, Forward], prepared: Prepared, cx: Context,
                    progress: Callable[[int], None]) -> list[Any]:
        runner = _runner(graphs, cx)
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
