"""Compose a Hydra config from conf/ with command-line overrides, with clear errors."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from planner.config import composecache
from planner.config.conftree import (
    CONF_DIR,  # noqa: F401 (importers find it here, as before)
    PACKAGED,
    ConfigTree,
    hydra_for,
)
from planner.config.overrides import first_line, parse_overrides
from planner.config.provenance import check_with_files
from planner.config.unread import settle_chosen
from planner.config.validate import known_paths, open_paths
from planner.errors import ConfigError
from planner.support.suggest import did_you_mean

GROUPS = ("model", "export", "optim", "quant", "target", "verify", "eval", "perf",
          "executor")


def group_options(group: str, tree: ConfigTree = PACKAGED) -> tuple[str, ...]:
    """Names of the configs in a group (conf/<group>/*.yaml and the tree's own), sorted."""
    return tree.options(group)


def compose(overrides: list[str] | tuple[str, ...] = (),
            tree: ConfigTree = PACKAGED) -> dict[str, Any]:
    """Compose the tree's primary config (conf/config.yaml) with Hydra overrides into a plain
    dict (values resolved). With user config dirs the result is validated here, so that an
    error names the user's file that set the bad value."""
    remembered = composecache.recall(overrides, tree)
    if remembered is not None:
        return remembered
    from omegaconf import OmegaConf

    check_overrides(parse_overrides(overrides), tree)
    cfg = compose_config(list(overrides), tree)
    try:
        config = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except Exception as exc:
        raise ConfigError(f"config: {first_line(exc)}") from exc
    assert isinstance(config, dict)
    settle_chosen(config, overrides)
    if not tree.packaged_only:
        check_with_files(config, tree, list(overrides))
    composecache.remember(overrides, tree, cfg, config)
    return config


def compose_config(overrides: list[str], tree: ConfigTree = PACKAGED) -> Any:
    """Hydra compose of the tree's primary config: the DictConfig, before resolution."""
    from hydra import compose as hydra_compose

    try:
        with hydra_for(tree):
            return hydra_compose(config_name=tree.config_name, overrides=overrides)
    except Exception as exc:
        if yaml_mark(exc) is not None:
            raise ConfigError(yaml_error(exc, tree)) from exc
        hint = "; to sweep over values add -m" if "Ambiguous value" in str(exc) else \
            _merge_hint(exc)
        raise ConfigError(f"config: {first_line(exc)}{hint}") from exc


def _merge_hint(exc: BaseException) -> str:
    """What an override whose value has the wrong shape for its key should be (OmegaConf says
    only 'Cannot merge DictConfig with ListConfig', on the exception's cause)."""
    cause = exc.__cause__ or exc.__context__
    while cause is not None and not getattr(cause, "full_key", None):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return ""
    key, kind = cause.full_key, getattr(cause, "object_type", None)
    if "Cannot merge" in str(cause) and kind in (list, dict):
        return (f": {key} takes a list; write its value in [ ], e.g. {key}=[{{...}}]"
                if kind is list else f": {key} takes a mapping; write its value in {{ }}, "
                f"or set one of its keys ({key}.NAME=VALUE)")
    return f": {key}: {first_line(cause)}"


def yaml_mark(exc: BaseException) -> Any:
    """Where PyYAML says a syntax error is (None for other errors)."""
    return getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)


def yaml_error(exc: BaseException, tree: ConfigTree) -> str:
    """A YAML syntax error as `FILE:LINE:COLUMN: what` (PyYAML's marks count from 0)."""
    mark = yaml_mark(exc)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "bad YAML"
    context = getattr(exc, "context", None)
    where = f"{tree.display(Path(mark.name))}:{mark.line + 1}:{mark.column + 1}"
    return (f"{where}: not valid YAML: {problem}" + (f" ({context})" if context != problem
                                                      and context else "") + "; fix the file")


def compose_timed(overrides: list[str] | tuple[str, ...] = (), store: str | None = None,
                  tree: ConfigTree = PACKAGED,
                  timings: dict[str, float] | None = None) -> dict[str, Any]:
    """compose(), timed into timings["compose_s"], with an optional store dir applied."""
    t0 = time.perf_counter()
    config = compose(overrides, tree)
    if timings is not None:
        timings["compose_s"] = time.perf_counter() - t0
    if store:
        from planner.config.storepath import checked_store_path

        config["store"]["path"] = str(checked_store_path(store))
    return config


def check_overrides(parsed: list[Any], tree: ConfigTree = PACKAGED,
                    memo: dict[str, list[str]] | None = None) -> None:
    """Reject overrides that name an unknown group option or key, with a did-you-mean.
    memo: each override's findings by its text, for a caller that checks the same ones often
    (a sweep's jobs)."""
    errors: list[str] = []
    for ov in parsed:
        if memo is None:
            errors += override_errors(ov, tree)
            continue
        if ov.input_line not in memo:
            memo[ov.input_line] = override_errors(ov, tree)
        errors += memo[ov.input_line]
    if errors:
        raise ConfigError(*errors)


def override_errors(ov: Any, tree: ConfigTree = PACKAGED) -> list[str]:
    """What is wrong with one parsed override: an unknown group option or key."""
    key = ov.key_or_group
    paths = known_paths()
    if not key:
        return [f"override '{ov.input_line}': no key before '='; write key=value"]
    if ov.is_add() and "." not in key and tree.has_group(key):
        return _check_group_choice(key, ov, tree)  # +experiment=NAME
    if ov.is_add() or ov.is_delete() or key.startswith("hydra"):
        return []
    if key in GROUPS:
        return _check_group_choice(key, ov, tree)
    if key not in paths and any(key.startswith(f"{o}.") for o in open_paths()):
        return [(f"{key}: not in the config yet; add it with "
                f"+{key}={ov.value() if ov.value() is not None else 'VALUE'}")]
    if key not in paths:
        return [(f"{key}: unknown key{did_you_mean(key, _siblings(key, paths))}; "
                "see `modelplan config` for the keys this config has")]
    return []


def _check_group_choice(group: str, ov: Any, tree: ConfigTree) -> list[str]:
    from hydra.core.override_parser.types import Glob
    from hydra.errors import HydraException

    options = group_options(group, tree)
    where = f"conf/{group}/" if tree.packaged_only else tree.where(group)
    if isinstance(ov.value(), Glob):  # glob(...) picks among the group's options
        picked = ov.value().filter(list(options))
        return [] if picked else [(f"{group}: {ov.input_line!r} matches none of "
                                   f"{', '.join(options)} (configs in {where})")]
    try:
        values = ov.sweep_string_iterator() if ov.is_sweep_override() else [ov.value()]
    except HydraException:  # interval(...) and the like: no options to enumerate
        return [(f"{group}: {ov.input_line!r} does not name configs; sweep a group with "
                 f"{group}=a,b or {group}=glob(PATTERN) over {', '.join(options)}")]
    errors = []
    for value in values:
        if not isinstance(value, str) or value not in options:
            errors.append(f"{group}: '{value}' is not one of {', '.join(options)}"
                          f"{did_you_mean(str(value), options)} (configs in {where})")
    return errors


def _siblings(key: str, paths: frozenset[str]) -> list[str]:
    """Known keys with the same parent as `key` (the top-level keys for an unknown parent)."""
    parent = key.rpartition(".")[0]
    while parent and parent not in paths:
        parent = parent.rpartition(".")[0]
    prefix = parent + "." if parent else ""
    depth = prefix.count(".")
    return sorted(p for p in paths if p.startswith(prefix) and p.count(".") == depth)
