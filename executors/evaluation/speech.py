"""Speech recognition with a CTC head (wav2vec2, HuBERT): each frame's most likely token,
repeats merged and blanks dropped (CTC collapse); with an encoder-decoder (Whisper) greedy
decoding from its start and forced tokens (executors/evaluation/generation.py); as text through the checkpoint's tokenizer
(token ids when it has none); word and character error rates against the `transcript` column,
else against PyTorch's transcripts (executors/evaluation/textscore.py)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby
from typing import Any

import numpy as np

from executors.evaluation import generation, textscore
from executors.evaluation.base import (
    Context,
    EvalDataError,
    Evaluator,
    Forward,
    Prepared,
    first,
)
from executors.evaluation.inputs import audio_feed


def ctc_collapse(frame_ids: list[int], blank: int) -> list[int]:
    """CTC's reading of per-frame tokens: runs of one token are one token, blanks dropped
    (so a repeated letter survives only with a blank between its two runs)."""
    return [token for token, _ in groupby(frame_ids) if token != blank]


def blank_id(cx: Context, tok: Any) -> int:
    """CTC's blank: the tokenizer's pad token (Wav2Vec2CTCTokenizer), else config.json's."""
    pad = getattr(tok, "pad_token_id", None) if tok is not None else None
    if pad is None:
        pad = cx.info.get("pad_token_id")
    return int(pad) if pad is not None else 0


def transcript(frame_ids: list[int], cx: Context, tok: Any) -> str:
    tokens = ctc_collapse(frame_ids, blank_id(cx, tok))
    if tok is None:
        return textscore.ids_text(tokens)
    # already collapsed: the CTC tokenizer must not merge repeats a blank kept apart
    return str(tok.decode(tokens, skip_special_tokens=True, group_tokens=False))


class Speech(Evaluator):
    tasks = ("automatic-speech-recognition",)

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        feeds = []
        for i, row in enumerate(rows):
            if row.get("audio") is None:
                raise EvalDataError(f"eval.dataset.columns.audio: row {i} has no audio; map "
                                    "eval.dataset.columns.audio to a column of audio files or "
                                    "{array, sampling_rate} cells")
            feeds.append(audio_feed(cx, row["audio"]))
        return Prepared(feeds, rows)

    def predictions(self, graphs: dict[str, Forward], prepared: Prepared, cx: Context,
                    progress: Callable[[int], None]) -> list[Any]:
        """CTC: one graph, one pass; an encoder-decoder (Whisper): greedy decoding."""
        if not generation.has_decoder(cx):
            return super().predictions(graphs, prepared, cx, progress)
        return generation.decoded_texts(graphs, prepared, cx, progress, strip=True)

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        tok = textscore.tokenizer(cx.checkpoint)
        name = "logits" if "logits" in outputs[0] else next(iter(outputs[0]))
        return [transcript(first(o[name]).argmax(-1).tolist(), cx, tok) for o in outputs]

    def truth(self, prepared: Prepared, cx: Context) -> list[Any]:
        return textscore.references(prepared.rows, "transcript")

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        return textscore.error_rates(predictions, truth)

    def notes(self, cx: Context) -> list[str]:
        return [] if textscore.tokenizer(cx.checkpoint) is not None else \
            [textscore.NO_TOKENIZER]
