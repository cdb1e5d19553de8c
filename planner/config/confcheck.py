"""Check changed config files (the pre-commit hooks): each file composes as what it is and
validates against the schema, and with `plan` still plans (no rule rejects it).

What a file is follows from where it sits in a config dir: `ours.yaml` at the top is a primary
config (--config-name ours), `model/our_vit.yaml` is an option of a group the packaged config
selects (model=our_vit), and a file of any other group is added (+experiment=int8_cpu)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from planner.config.compose import GROUPS
from planner.config.conftree import ConfigTree
from planner.errors import ModelplanError


@dataclass(frozen=True)
class Target:
    file: Path
    tree: ConfigTree
    overrides: tuple[str, ...]

    @property
    def how(self) -> str:
        name = self.tree.config_name
        return " ".join(([f"--config-name {name}"] if name != "config" else [])
                        + list(self.overrides))


def target(file: Path, tree: ConfigTree) -> Target | None:
    """How to compose `file`, or None when it is not in one of the tree's user dirs."""
    path = file.resolve()
    root = next((d for d in tree.user_dirs if d in path.parents), None)
    if root is None or path.suffix != ".yaml":
        return None
    parts = path.relative_to(root).with_suffix("").parts
    if len(parts) == 1:
        return Target(path, replace(tree, config_name=parts[0]), ())
    group, option = parts[0], "/".join(parts[1:])
    pick = f"{group}={option}" if group in GROUPS else f"+{group}={option}"
    return Target(path, tree, (pick,))


def check(t: Target, plan: bool) -> list[str]:
    """Error lines for one file (empty when it composes, validates and, with plan, plans)."""
    from planner.config.compose import compose
    from planner.planning import plan_for

    try:
        config = compose(list(t.overrides), t.tree)
        if plan:
            plan_for(config, symbolic=True)  # review machines have no weights
    except ModelplanError as exc:
        shown = t.tree.display(t.file)
        return [line if line.startswith(f"{shown}:") else f"{shown} ({t.how}): {line}"
                for line in exc.lines]
    return []


def check_files(files: list[str], tree: ConfigTree, plan: bool) -> tuple[int, list[str]]:
    """(how many config files were checked, error lines) for the files a hook was given.
    Files that are not YAML are skipped; a YAML file outside the tree's directories, or no
    file checked at all, is an error (a hook that checks nothing must not pass)."""
    errors: list[str] = []
    checked = 0
    used = " and ".join(f"{tree.display(d)}/" for d in tree.user_dirs)
    for name in files:
        path = Path(name)
        if not path.is_file():
            errors.append(f"{name}: no such file; pass the config files to check")
            continue
        if path.suffix != ".yaml":
            continue
        t = target(path, tree)
        if t is None:
            errors.append(f"{name}: not in the config tree {used}; pass --config-dir DIR "
                          "for the tree it belongs to (or leave it out of the hook's files:)")
            continue
        checked += 1
        errors += check(t, plan)
    if not checked and not errors:
        given = f"none of the {len(files)} file(s) given is" if files else "no file given, so none is"
        errors.append(f"no config file checked: {given} a .yaml file in the config tree "
                      f"{used}; pass the changed config files (and --config-dir DIR for "
                      "another tree)")
    return checked, errors
