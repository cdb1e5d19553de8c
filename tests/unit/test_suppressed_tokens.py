"""The tokens a generation config suppresses are never chosen by the greedy loop (as
transformers' generate applies suppress_tokens, single-token bad_words_ids and, at the first
new token, begin_suppress_tokens), while the logits it keeps are the stepper's own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from executors.generation import loop
from executors.generation.encoder_decoder import Decoding, suppressed_tokens


def stepper(rows: list[list[float]]):
    """A stepper whose i-th logits are rows[i] whatever it is fed."""
    it = iter(rows)
    return (lambda: np.array(next(it))), (lambda token: np.array(next(it), dtype=float))


def test_a_banned_token_is_never_chosen_and_the_logits_stay() -> None:
    rows = [[0.1, 5.0, 3.0, 1.0], [4.0, 0.0, 2.0, 9.0], [1.0, 8.0, 0.0, 7.0]]
    first, step = stepper(rows)
    got = loop.greedy(first, step, 3)
    assert got.tokens == [1, 3, 1]
    first, step = stepper(rows)
    how = Decoding(start=0, eos=None, pad=0, length=8, suppressed=(3,), begin_suppressed=(1,))
    got = loop.greedy(first, step, 3, banned=how.banned)
    assert got.tokens == [2, 0, 1]  # not 1 first (begin), never 3
    np.testing.assert_array_equal(got.logits[1], rows[1])  # the stepper's logits, unmasked


def test_out_of_range_ids_are_ignored() -> None:
    first, step = stepper([[0.0, 1.0]])
    assert loop.greedy(first, step, 1, banned=lambda i: (1, 50256)).tokens == [0]


def test_the_generation_config_says_what_is_suppressed(tmp_path: Path) -> None:
    assert suppressed_tokens(None) == {} and suppressed_tokens(tmp_path) == {}
    (tmp_path / "generation_config.json").write_text(json.dumps({
        "suppress_tokens": [7, 3], "begin_suppress_tokens": [220, 50256],
        "bad_words_ids": [[58100], [5, 6]]}))
    got = suppressed_tokens(tmp_path)
    # a multi-token bad word is a sequence rule, not one token: not suppressed here
    assert got == {"suppressed": (3, 7, 58100), "begin_suppressed": (220, 50256)}
    how = Decoding(start=0, eos=None, pad=0, length=8, **got)
    assert how.banned(0) == (220, 50256, 3, 7, 58100) and how.banned(1) == (3, 7, 58100)
