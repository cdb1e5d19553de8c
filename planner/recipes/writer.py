"""Write imported configs into a user config tree, each one only once it composes and
validates exactly as `modelplan plan --config-dir DIR --config-name NAME` will compose it;
never over a file a person wrote."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import InternalError, ModelplanError
from planner.recipes.convert import FAILED, IMPORTED, Build
from planner.recipes.emit import MARKER, config_text, values
from planner.support.atomic import write_atomic


def write_all(builds: list[Build], out: Path, shown_out: str, force: bool,
              progress: Callable[[str], None] | None = None) -> None:
    """Write each imported build's config to out/<name>.yaml; a build that cannot be written
    becomes FAILED with the reason."""
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".modelplan-import-", dir=out))
    todo = [b for b in builds if b.status == IMPORTED]
    written: dict[str, Build] = {}
    try:
        for i, build in enumerate(todo, 1):
            if progress:
                progress(f"[{i}/{len(todo)}] {build.name}")
            try:
                if build.name in written:
                    raise ModelplanError(f"config name {build.name} is also the name of "
                                         f"{written[build.name].shown}'s; import one of them "
                                         "into another -o DIR")
                _write(build, out, stage, shown_out, force)
                written[build.name] = build
            except ModelplanError as exc:
                build.status, build.message = FAILED, exc.lines[0]
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _write(build: Build, out: Path, stage: Path, shown_out: str, force: bool) -> None:
    target = out / f"{build.name}.yaml"
    if target.exists() and not force and not _generated(target):
        raise ModelplanError(f"{shown_out}/{target.name} exists and was not written by "
                             "modelplan import; pass --force to overwrite it")
    text = config_text(build, shown_out)
    staged = stage / target.name
    staged.write_text(text, encoding="utf-8")
    try:
        composed = check(stage, build.name)
    finally:
        staged.unlink()
    if not _holds(values(build), composed):  # a writer bug must not become a config
        raise InternalError(f"{build.name}: the written config does not read back as meant; "
                            "report this recipe")
    try:
        write_atomic(target, text)
    except OSError as exc:
        raise ModelplanError(f"{shown_out}/{target.name}: cannot write it "
                             f"({exc.strerror or exc}); pass a writable -o DIR") from exc


def _generated(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as fh:
            return fh.readline().startswith(MARKER)
    except OSError:
        return False


def check(tree_dir: Path, name: str) -> dict[str, Any]:
    """Compose `name` from `tree_dir` on the packaged groups and validate it, as `modelplan
    plan` would; the composed config."""
    from planner.config.compose import compose
    from planner.config.conftree import ConfigTree
    from planner.config.validate import check_config

    config = compose([], ConfigTree((tree_dir.resolve(),), name))
    check_config(config)
    return config


def _holds(meant: Any, got: Any) -> bool:
    """Every value meant is in the composed config, as meant."""
    if isinstance(meant, dict) and meant:
        return isinstance(got, dict) and all(k in got and _holds(v, got[k])
                                             for k, v in meant.items())
    return bool(meant == got and type(meant) is type(got) or meant == got == {})
