"""Did-you-mean hints for a name that is not one of the known ones."""

from __future__ import annotations

import difflib


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
