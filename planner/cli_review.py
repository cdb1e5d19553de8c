"""Config-review commands of the `modelplan` CLI: `diff --rev`. Parsing and printing only;
the work is in planner.review."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import ConfigError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def _command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    COMMANDS[fn.__name__.removeprefix("cmd_")] = fn
    return fn


def emit(text: str, output: str | None, done: str) -> None:
    """Print `text`, or write it whole to `output` and say `done`."""
    from planner.cli import write_atomic

    if output:
        write_atomic(Path(output), text)
        print(done)
    else:
        sys.stdout.write(text)


def render_review(rv: Any, fmt: str) -> str:
    from planner.render import review as render

    data = rv.to_json()
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "md":
        return render.render_md(data, {j.index: j.head.ir for j in rv.jobs if j.head.ir})
    return render.render_text(data)


def diff_rev(args: argparse.Namespace) -> int:
    """`modelplan diff --rev BASE [overrides]`: the config tree at BASE against the working tree."""
    from planner.render.review import summary
    from planner.review import review

    rv = review(args.rev, args.overrides, args.tree, args.multirun)
    emit(render_review(rv, args.format), args.output,
         f"{summary(rv.to_json())} Written to {args.output} ({args.format}).")
    if rv.head_errors:
        raise ConfigError(*rv.head_errors)
    return 0


def add_commands(sub: Any, overrides: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add the review commands to the `modelplan` subparsers."""
    del sub, overrides  # review, validate and schema are added here


def _debug(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                    help="show tracebacks on errors")
