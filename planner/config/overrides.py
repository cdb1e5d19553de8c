"""Hydra overrides parsed by Hydra's own grammar, and Hydra's errors as one line."""

from __future__ import annotations

from functools import cache
from typing import Any

from planner.errors import ConfigError


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, plus Hydra's fix line when it gives one."""
    lines = [ln.strip() for ln in (str(exc).strip() or type(exc).__name__).splitlines()]
    fix = [ln for ln in lines[1:] if ln.startswith("To append to your config use")]
    return " ".join(lines[:1] + fix)


def parse_overrides(overrides: list[str] | tuple[str, ...]) -> list[Any]:
    return [_parse_one(text) for text in overrides]


@cache
def _parse_one(text: str) -> Any:
    """One override, parsed by Hydra's grammar (memoised: sweeps repeat the same strings)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        (parsed,) = OverridesParser.create().parse_overrides([text])
    except Exception as exc:
        raise ConfigError(
            f"override '{text}': cannot parse ({first_line(exc)}); "
            "write key=value, e.g. quant=w8a8 or export.opset=17"
        ) from exc
    return parsed
