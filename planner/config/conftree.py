"""Where configs come from: the packaged conf/ and a project's own config directories.

A ConfigTree is Hydra's config search path as modelplan uses it: the packaged groups first
(Hydra's `main`), then each user directory (`--config-dir DIR`, then `hydra.searchpath`
entries), exactly where Hydra's own `--config-dir` puts them. A user directory adds options
to any group, new groups (`experiment/`), and primary configs (`--config-name NAME`); a file
with the name of a packaged one would be shadowed by it, so that is an error, not a surprise.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from planner.config.overrides import parse_overrides
from planner.errors import ConfigError, UsageError
from planner.support.suggest import did_you_mean

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PRIMARY = "config"
SEARCHPATH = "hydra.searchpath"


@dataclass(frozen=True)
class ConfigTree:
    user_dirs: tuple[Path, ...] = ()
    config_name: str = PRIMARY
    labels: tuple[tuple[Path, str], ...] = ()  # how messages name a directory (e.g. REV:conf)

    @property
    def dirs(self) -> tuple[Path, ...]:
        return (CONF_DIR, *self.user_dirs)

    @property
    def packaged_only(self) -> bool:
        return not self.user_dirs and self.config_name == PRIMARY

    def find(self, rel: str) -> Path | None:
        """The file Hydra loads for `rel` (e.g. `model/tiny_bert.yaml`): the first that exists."""
        return _find(self.dirs, rel)

    def options(self, group: str) -> tuple[str, ...]:
        """Every option of a group across the tree, sorted (`vision/vit` for nested files)."""
        return _options(self.dirs, group)

    def has_group(self, group: str) -> bool:
        return any((d / group).is_dir() for d in self.dirs)

    def primaries(self) -> tuple[str, ...]:
        return tuple(sorted({p.stem for d in self.dirs for p in d.glob("*.yaml")}))

    def where(self, group: str) -> str:
        """The group's directories, as messages name them."""
        return " or ".join(f"{self.display(d / group)}/" for d in self.dirs
                           if (d / group).is_dir())

    def display(self, path: Path) -> str:
        """A path as a user knows it: relative to the current directory, or REV:path."""
        for root, label in self.labels:
            if path == root or root in path.parents:
                rel = path.relative_to(root).as_posix()
                return label if rel == "." else f"{label}/{rel}"
        if path == CONF_DIR or CONF_DIR in path.parents:
            return f"<modelplan>/conf/{path.relative_to(CONF_DIR).as_posix()}".rstrip("/.")
        try:
            return path.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return str(path)

    def is_user_file(self, path: Path) -> bool:
        return any(d == path or d in path.parents for d in self.user_dirs)

    def search_path(self) -> Any:
        """Hydra's ConfigSearchPath for this tree (user dirs where `--config-dir` puts them)."""
        from hydra._internal.utils import create_config_search_path
        from hydra.core.config_search_path import SearchPathQuery

        csp = create_config_search_path(str(CONF_DIR))
        for d in self.user_dirs:
            csp.prepend(provider="command-line", path=f"file://{d}",
                        anchor=SearchPathQuery(provider="schema"))
        return csp

    def check(self) -> None:
        """Refuse what Hydra would silently ignore: a user file shadowed by an earlier one,
        and a primary config that is not in the tree."""
        errors = []
        for i, d in enumerate(self.user_dirs):
            for path in sorted(d.rglob("*.yaml")):
                rel = path.relative_to(d).as_posix()
                first = _find(self.dirs[: i + 1], rel)
                if first is not None:
                    errors.append(_shadow_message(self, path, first, rel))
        if self.config_name not in self.primaries():
            errors.append(f"--config-name {self.config_name}: there is no {self.config_name}"
                          f".yaml at the top of {' or '.join(map(self.display, self.dirs))}"
                          f"{did_you_mean(self.config_name, self.primaries())}; "
                          f"primary configs here: {', '.join(self.primaries())}")
        if errors:
            raise ConfigError(*errors)


def _shadow_message(tree: ConfigTree, path: Path, first: Path, rel: str) -> str:
    if "/" not in rel:
        return (f"{tree.display(path)}: a primary config named like the one in "
                f"{tree.display(first.parent)} is never loaded; rename it (e.g. "
                f"ours_{path.name}) and pass --config-name ours_{path.stem}")
    group, _, option = rel.removesuffix(".yaml").rpartition("/")
    return (f"{tree.display(path)}: {group} option '{option}' is already defined by "
            f"{tree.display(first)}, which Hydra loads instead; rename it (e.g. "
            f"our_{option}) and start it with `defaults: [{option}]` to extend that one")


@cache
def _find(dirs: tuple[Path, ...], rel: str) -> Path | None:
    return next((d / rel for d in dirs if (d / rel).is_file()), None)


@cache
def _options(dirs: tuple[Path, ...], group: str) -> tuple[str, ...]:
    found = {p.relative_to(d / group).with_suffix("").as_posix()
             for d in dirs for p in (d / group).rglob("*.yaml")}
    return tuple(sorted(found))


def user_dir(text: str, option: str) -> Path:
    """A config directory from `--config-dir DIR`, `file://DIR` or `pkg://module.path`."""
    if text.startswith("pkg://"):
        try:
            spec = importlib.util.find_spec(text.removeprefix("pkg://").replace("/", "."))
        except (ImportError, ValueError):  # a parent package that does not exist
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise UsageError(f"{option} {text}: no such installed package; "
                             "install it or give a directory")
        return Path(next(iter(spec.submodule_search_locations))).resolve()
    path = Path(text.removeprefix("file://")).expanduser().resolve()
    if not path.is_dir():
        raise UsageError(f"{option} {text}: not a directory; give the directory that holds "
                         "your config groups (e.g. conf, with conf/model/*.yaml)")
    return path


def from_cli(config_dirs: list[str] | None, config_name: str | None,
             overrides: list[str]) -> tuple[ConfigTree, list[str]]:
    """The tree a command line names (`--config-dir` given first, then `hydra.searchpath`),
    and the overrides without `hydra.searchpath` (the tree carries it)."""
    dirs = [user_dir(d, "--config-dir") for d in config_dirs or []]
    rest = []
    for text in overrides:
        if text.partition("=")[0].lstrip("+~") == SEARCHPATH:
            dirs += [user_dir(p, SEARCHPATH) for p in _searchpath_value(text)]
        else:
            rest.append(text)
    unique = tuple(dict.fromkeys(d for d in dirs if d != CONF_DIR))
    tree = ConfigTree(unique, config_name or PRIMARY)
    if not tree.packaged_only:
        tree.check()
    return tree, rest


def _searchpath_value(text: str) -> list[str]:
    (ov,) = parse_overrides([text])
    value = ov.value()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{text}: hydra.searchpath is a list of directories, "
                          "e.g. hydra.searchpath=[file:///path/to/conf]")
    return value


def from_hydra(hydra_cfg: Any) -> ConfigTree:
    """The tree of a running Hydra app (its `hydra` config node): user dirs from its search
    path (`--config-dir`, `hydra.searchpath`), the primary config from `--config-name`."""
    dirs = tuple(Path(s.path).resolve() for s in hydra_cfg.runtime.config_sources
                 if s.schema == "file" and s.provider not in ("main", "hydra", "schema"))
    return ConfigTree(tuple(d for d in dict.fromkeys(dirs) if d != CONF_DIR),
                      hydra_cfg.job.config_name or PRIMARY)


@contextmanager
def hydra_for(tree: ConfigTree) -> Iterator[None]:
    """Hydra initialised with this tree's search path (global state, cleared on exit)."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    version.setbase(None)
    try:
        Hydra.create_main_hydra2(task_name="app", config_search_path=tree.search_path())
        yield
    finally:
        GlobalHydra.instance().clear()


PACKAGED = ConfigTree()
