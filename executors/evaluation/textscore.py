"""Generated text against references (transcripts, translations, captions): both sides
lower-cased with punctuation stripped and whitespace collapsed, then word and character error
rates (jiwer) over the whole corpus, corpus BLEU (sacrebleu, as a fraction 0..1 like every other
eval metric, so eval.max_drop has one unit) and exact match; and token ids as text when a
checkpoint has no tokenizer."""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path
from typing import Any

from executors.evaluation.base import EvalDataError
from executors.samples import text as shipped_text

NO_TOKENIZER = ("the checkpoint has no tokenizer: outputs are compared as space-separated "
                "token ids")


def normalize(text: str) -> str:
    """Lower-cased, punctuation and symbols dropped (apostrophes too: don't -> dont),
    whitespace collapsed."""
    kept = "".join(" " if c.isspace() else c for c in text.lower()
                   if not unicodedata.category(c).startswith(("P", "S")))
    return " ".join(kept.split())


def error_rates(predictions: list[str], references: list[str]) -> dict[str, float]:
    """Corpus word and character error rates of normalized texts (edits / reference length;
    an empty reference counts every inserted word or character as one error)."""
    import jiwer

    hyps, refs = [normalize(p) for p in predictions], [normalize(r) for r in references]
    return {"wer": float(jiwer.wer(refs, hyps)), "cer": float(jiwer.cer(refs, hyps))}


def bleu(predictions: list[str], references: list[str]) -> float:
    """Corpus BLEU of normalized texts, 0..1 (sacrebleu's score / 100, rounded to 1e-9: its
    100.00000000000004 is 1)."""
    import sacrebleu

    hyps, refs = [normalize(p) for p in predictions], [normalize(r) for r in references]
    return round(float(sacrebleu.corpus_bleu(hyps, [refs]).score) / 100.0, 9)


def exact_match(predictions: list[str], references: list[str]) -> float:
    same = [normalize(p) == normalize(r) for p, r in zip(predictions, references, strict=True)]
    return sum(same) / max(len(same), 1)


def tokenizer(checkpoint: Path | None) -> Any:
    """The checkpoint's tokenizer, or None (then token ids are the text: see `ids_text`)."""
    return shipped_text.tokenizer(checkpoint)


def ids_text(ids: list[int]) -> str:
    return " ".join(str(i) for i in ids)


def references(rows: list[dict[str, Any]], role: str) -> list[str]:
    """The reference text of every row, from the `role` column."""
    out = []
    for i, row in enumerate(rows):
        value = row.get(role)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            raise EvalDataError(f"eval.dataset.columns.{role}: row {i} has no {role} text; "
                                f"fill it, or map eval.dataset.columns.{role} to a column of "
                                "reference texts")
        out.append(value if isinstance(value, str) else _joined(value, role))
    return out


def _joined(value: Any, role: str) -> str:
    """A reference given as a list of strings (one reference per row is read: the first)."""
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return value[0]
    raise EvalDataError(f"eval.dataset.columns.{role}: a {role} cell is {type(value).__name__}, "
                        f"not text; map eval.dataset.columns.{role} to a column of strings")
