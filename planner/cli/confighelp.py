"""The config groups as `plan --help` and `run --help` show them, read from the packaged
config tree (conf/): each group's options with what each is, and the keys they set."""

from __future__ import annotations

import json
import textwrap
from typing import Any

WIDTH = 100
ABOUT = 80  # characters of an option's description


def config_groups_help() -> str:
    from planner.config.catalogue import groups

    lines = ["config groups (conf/): GROUP=OPTION picks an option (* marks the default),",
             "GROUP.KEY=VALUE sets one key, --config-dir DIR adds options of your own",
             "(docs/configs.md):", ""]
    found = groups()
    width = max(len(o.name) for g in found for o in g.options) + 2
    for group in found:
        lines.append(f"  {group.name}")
        for option in group.options:
            mark = " *" if option.name == group.default else ""
            lines.append(f"    {(option.name + mark).ljust(width + 1)} {_short(option.about)}"
                         .rstrip())
        keys = " ".join(f"{group.name}.{k}={_value(v)}" for k, v in group.keys[:10])
        lines += textwrap.wrap(f"keys: {keys}", WIDTH, initial_indent="    ",
                               subsequent_indent="          ", break_on_hyphens=False)
    lines += ["", "e.g. modelplan plan model=tiny_bert quant=w8a8 target=cpu verify.threshold=0.999"]
    return "\n".join(lines)


def _short(text: str) -> str:
    return text if len(text) <= ABOUT else text[:ABOUT].rsplit(" ", 1)[0] + " ..."


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value).replace(" ", "")
