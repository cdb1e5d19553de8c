"""Which config file set a value: so that an error in a composed config names the user's file
as well as the dotted path (`conf/model/our_model.yaml: model.opset: ...`).

Hydra's defaults list says which files were merged, in order; the last one that sets a path
is where its value came from. Only read when a config is invalid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.config.conftree import ConfigTree, hydra_for
from planner.config.validate import check_config
from planner.errors import ConfigError


def check_with_files(config: dict[str, Any], tree: ConfigTree, overrides: list[str]) -> None:
    """check_config, with each error line led by the user file that set the bad value."""
    try:
        check_config(config, tree)
    except ConfigError as exc:
        raise ConfigError(*name_files(exc.lines, tree, overrides)) from exc


def name_files(lines: list[str], tree: ConfigTree, overrides: list[str]) -> list[str]:
    """Error lines (each starting with a dotted path) led by the user file to fix, if any."""
    setters = files_by_path(tree, overrides)  # the config composed, so its defaults list does
    overridden = _override_paths(overrides, tree)
    out = []
    for line in lines:
        path = line.partition(":")[0]
        culprit = None if _covers(overridden, path) else blame(path, setters, tree)
        out.append(f"{tree.display(culprit)}: {line}" if culprit else line)
    return out


def files_by_path(tree: ConfigTree, overrides: list[str]) -> list[tuple[str, Path]]:
    """(dotted path, file) for every value each config file sets, in Hydra's merge order."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    def defaults() -> list[Any]:
        loader = GlobalHydra.instance().config_loader()
        return loader.compute_defaults_list(tree.config_name, overrides, RunMode.RUN).defaults

    if GlobalHydra.instance().is_initialized():  # inside a running Hydra app
        result = defaults()
    else:
        with hydra_for(tree):
            result = defaults()
    out: list[tuple[str, Path]] = []
    for d in result:
        package = d.package or ""
        if d.config_path is None or package == "hydra" or package.startswith("hydra."):
            continue
        path = tree.find(f"{d.config_path}.yaml")
        if path is None:
            continue
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if isinstance(node, dict):
            node.pop("defaults", None)
            node.pop("hydra", None)
            out += [(k, path) for k in _leaves(node, f"{package}." if package else "")]
    return out


def blame(path: str, setters: list[tuple[str, Path]], tree: ConfigTree) -> Path | None:
    """The user file to fix for a bad value at `path`: the one that set it (or a mapping
    above it), else the last user file that set anything in the same top-level group."""
    last = dict(setters)
    probe = path
    while probe:
        if probe in last and tree.is_user_file(last[probe]):
            return last[probe]
        probe = probe.rpartition(".")[0]
    top = path.split(".")[0]
    mine = [f for k, f in setters if k.split(".")[0] == top and tree.is_user_file(f)]
    return mine[-1] if mine else None


def _leaves(node: Any, prefix: str) -> list[str]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in _leaves(v, f"{prefix}{k}.")]
    return [prefix[:-1]]


def _override_paths(overrides: list[str], tree: ConfigTree) -> set[str]:
    """Paths set by value overrides (group choices like model=x set no value themselves)."""
    keys = {text.partition("=")[0].lstrip("+~") for text in overrides if "=" in text}
    return {k for k in keys if not tree.has_group(k)}


def _covers(paths: set[str], path: str) -> bool:
    """An override set `path` or a mapping above it."""
    probe = path
    while probe:
        if probe in paths:
            return True
        probe = probe.rpartition(".")[0]
    return False
