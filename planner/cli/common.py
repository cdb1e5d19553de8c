"""What several commands share: the config tree a command line names, and writing where a
user pointed (-o FILE, --outputs DIR) with errors that name the option to change."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from planner.errors import UsageError
from planner.support.atomic import write_atomic


def write_output(path: Path, text: str | Iterable[str]) -> None:
    """Write a file the user named (-o FILE) whole or not at all (text: or its pieces)."""
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "it is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write it ({exc.strerror or exc}); "
                         "choose another -o FILE") from exc


def positive(text: str) -> int:
    """An argument that counts something: 1 or more."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def non_negative(text: str) -> int:
    """An argument that counts something, where 0 means none (or all, as its help says)."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _whole(text: str) -> int:
    if not re.fullmatch(r"-?[0-9]+", text.strip()):
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text[:40]!r}")
    return int(text)


# folders of the system, which a run's results never go into (nor anywhere below the first row)
SYSTEM_DIRS = frozenset({"/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64",
                         "/proc", "/run", "/sbin", "/sys", "/usr", "/var", "/home"})
SYSTEM_TREES = ("/dev", "/etc", "/proc", "/sys", "/usr", "/boot", "/bin", "/sbin", "/lib")


def results_dir(given: str, option: str) -> Path:
    """A folder a run publishes into (--outputs, --sweep-dir): named, not the root or a
    system folder, and writable."""
    if not given.strip():
        raise UsageError(f"{option} is empty; name the folder to publish into (e.g. "
                         f"{option} outputs)")
    path = Path(given).expanduser().resolve()
    if str(path) in SYSTEM_DIRS or any(str(path).startswith(t + "/") for t in SYSTEM_TREES):
        raise UsageError(f"{option} {path}: a system folder, where a run's results do not go; "
                         f"pass a folder of your own (e.g. {option} outputs)")
    return writable_dir(path, option)


def writable_dir(path: Path, option: str) -> Path:
    """`path` as a directory this process can write into, or a UsageError naming `option`."""
    path = path.resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".modelplan-probe.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write there ({exc.strerror or exc}); "
                         f"pass a writable {option} DIR") from exc
    return path


def config_tree(args: argparse.Namespace) -> Any:
    """The config tree the command line names (--config-dir, --config-name, hydra.searchpath);
    hydra.searchpath leaves the overrides, the tree carries it. Kept as args.tree."""
    from planner.config.conftree import from_cli

    args.tree, args.overrides = from_cli(args.config_dir, args.config_name, args.overrides)
    return args.tree
