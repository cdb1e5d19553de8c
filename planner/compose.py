"""Compose a Hydra config from conf/ with command-line overrides, with clear errors."""

from __future__ import annotations

import difflib
import time
from functools import cache
from pathlib import Path
from typing import Any

from planner.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("model", "export", "optim", "quant", "target", "verify", "perf", "executor")
MISSING = "???"
TIMINGS: dict[str, float] = {}


@cache
def group_options(group: str) -> tuple[str, ...]:
    """Names of the configs in a group (conf/<group>/*.yaml), sorted."""
    return tuple(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")))


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def compose(overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Compose conf/config.yaml with Hydra overrides into a plain dict (values resolved)."""
    from omegaconf import OmegaConf

    check_overrides(parse_overrides(overrides))
    cfg = compose_config(list(overrides))
    try:
        config = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except Exception as exc:
        raise ConfigError(f"config: {first_line(exc)}") from exc
    assert isinstance(config, dict)
    return config


def compose_config(overrides: list[str]) -> Any:
    """Hydra compose of conf/config.yaml: the DictConfig, before resolution."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return hydra_compose(config_name="config", overrides=overrides)
    except Exception as exc:
        hint = "; to sweep over values add -m" if "Ambiguous value" in str(exc) else ""
        raise ConfigError(f"config: {first_line(exc)}{hint}") from exc
    finally:
        GlobalHydra.instance().clear()


def compose_timed(overrides: list[str] | tuple[str, ...] = (),
                  store: str | None = None) -> dict[str, Any]:
    """compose(), timed into TIMINGS["compose_s"], with an optional store dir applied."""
    t0 = time.perf_counter()
    config = compose(overrides)
    TIMINGS["compose_s"] = time.perf_counter() - t0
    if store:
        from planner.storelayout import checked_store_path

        config["store"]["path"] = str(checked_store_path(store))
    return config


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


def check_overrides(parsed: list[Any]) -> None:
    """Reject overrides that name an unknown group option or key, with a did-you-mean."""
    from planner.validate import known_paths

    errors: list[str] = []
    paths = known_paths()
    for ov in parsed:
        key = ov.key_or_group
        if not key:
            errors.append(f"override '{ov.input_line}': no key before '='; write key=value")
            continue
        if ov.is_add() or ov.is_delete() or key.startswith("hydra"):
            continue
        if key in GROUPS:
            errors.extend(_check_group_choice(key, ov))
        elif key not in paths:
            errors.append(f"{key}: unknown key{did_you_mean(key, _siblings(key, paths))}; "
                          "see `modelplan config` for the keys this config has")
    if errors:
        raise ConfigError(*errors)


def _check_group_choice(group: str, ov: Any) -> list[str]:
    options = group_options(group)
    values = ov.sweep_string_iterator() if ov.is_sweep_override() else [ov.value()]
    errors = []
    for value in values:
        if not isinstance(value, str) or value not in options:
            errors.append(f"{group}: '{value}' is not one of {', '.join(options)}"
                          f"{did_you_mean(str(value), options)} (configs in conf/{group}/)")
    return errors


def _siblings(key: str, paths: frozenset[str]) -> list[str]:
    """Known keys with the same parent as `key` (the top-level keys for an unknown parent)."""
    parent = key.rpartition(".")[0]
    while parent and parent not in paths:
        parent = parent.rpartition(".")[0]
    prefix = parent + "." if parent else ""
    depth = prefix.count(".")
    return sorted(p for p in paths if p.startswith(prefix) and p.count(".") == depth)
