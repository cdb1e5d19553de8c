"""Shipped speech is the same whatever the process said before: eSpeak NG carries state from
one utterance to the next, so an unkept sentence would come out different the second time, and
calibration data (and the quantized graph under one store key) would follow the order steps ran
in."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("espeakng_loader")

from executors.samples import media, text


def test_a_sentence_is_the_same_after_other_speech() -> None:
    spk = media.speaker()
    line = text.sentences("calibration")[3]
    first = spk.say(line)
    for other in [*text.sentences("verify")[:3], "words no shipped sentence has"]:
        spk.say(other)
    assert np.array_equal(first, spk.say(line))
    assert first.size > media.RATE // 2 and np.abs(first).max() > 0.05  # speech, not silence


def test_unkept_speech_drifts_so_keeping_it_matters() -> None:
    """The library itself: the same text spoken twice from its state differs (what the kept
    sentences guard against)."""
    spk = media.speaker()
    words = "a sentence spoken twice"
    assert not np.array_equal(spk._speak(words), spk._speak(words))


def test_a_verify_sentence_is_the_same_in_a_process_that_said_nothing_else() -> None:
    line = text.sentences("verify")[0]
    code = ("import hashlib, sys; from executors.samples import media; "
            f"print(hashlib.sha1(media.speaker().say({line!r}).tobytes()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()[-1]
    media.speaker().say("more words first")
    assert hashlib.sha1(media.speaker().say(line).tobytes()).hexdigest() == out
