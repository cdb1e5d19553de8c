"""Keys a chosen option ignores: never accepted silently.

A group's schema declares, per kind of option (`if source is packaged then ...`), the keys such
an option does not read and their unset values (`x-unread`). A config whose chosen option
ignores a key that is set (by an override or a file) is an error naming the options that
read it: `model.path=./m` with `model=minilm` would otherwise build the packaged model.
"""

from __future__ import annotations

from typing import Any

import schemas
from planner.config.conftree import PACKAGED, ConfigTree
from planner.support.memo import frozen, remembered
from schemas.validator import is_valid


def unread_keys(group: str, node: dict[str, Any]) -> dict[str, Any]:
    """The keys an option of the group with these values ignores, each with its unset value."""
    return remembered("unread-keys", (group, frozen(node)), lambda: _unread_keys(group, node))


def _unread_keys(group: str, node: dict[str, Any]) -> dict[str, Any]:
    root = schemas.load("config")
    out: dict[str, Any] = {}
    for branch in root["properties"][group].get("allOf", []):
        declared = branch.get("then", {}).get("x-unread")
        if declared and is_valid(node, branch["if"], root):
            out.update(declared)
    return out


def settle_chosen(config: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> None:
    """A group option chosen on the command line (`eval=none`) sets aside what a config file
    set in that group and the option ignores: choosing it is the intent (an imported recipe's
    `eval.dataset`, with `eval=none`, is not evaluated, and the config is that of eval=none).
    A key the command line itself sets stays, and is still an error when ignored."""
    from planner.config.overrides import parse_overrides

    parsed = parse_overrides(list(overrides))
    chosen = {o.key_or_group for o in parsed if "." not in o.key_or_group
              and isinstance(config.get(o.key_or_group), dict)
              and not o.is_sweep_override() and not o.is_delete()}
    given = [o.key_or_group for o in parsed]
    for group in chosen:
        node = config.get(group)
        if not isinstance(node, dict):
            continue
        for key, unset in unread_keys(group, node).items():
            path = f"{group}.{key}"
            if not any(g == path or g.startswith(path + ".") for g in given):
                node[key] = unset


def unread_lines(config: dict[str, Any], tree: ConfigTree = PACKAGED) -> list[str]:
    """One line per set key that the chosen option of its group ignores."""
    lines = []
    for group, node in config.items():
        if not isinstance(node, dict) or group not in schemas.load("config")["properties"]:
            continue
        for key, unset in unread_keys(group, node).items():
            if key in node and node[key] != unset:
                lines.append(_line(group, key, node, tree))
    return lines


def _line(group: str, key: str, node: dict[str, Any], tree: ConfigTree) -> str:
    readers = [f"{group}={o}" for o in readers_of(group, key, tree)]
    listed = ", ".join(readers[:-1]) + " or " + readers[-1] if len(readers) > 1 else \
        "".join(readers)
    hint = f"; did you mean {listed}?" if readers else f"; unset {group}.{key}"
    return (f"{group}.{key} is set but {group}={node.get('name', '?')} does not read it"
            f"{hint}")


def readers_of(group: str, key: str, tree: ConfigTree = PACKAGED) -> list[str]:
    """The group's options (plain files) that read `key`: they set it and do not ignore it;
    those that require it (`???`) first."""
    from omegaconf import OmegaConf

    found = []
    for option in tree.options(group):
        path = tree.find(f"{group}/{option}.yaml")
        if path is None or "defaults:" in path.read_text():
            continue
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if isinstance(node, dict) and key in node and key not in unread_keys(group, node):
            found.append((node[key] != "???", option))
    return [option for _, option in sorted(found)]
