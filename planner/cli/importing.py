"""`modelplan import`: winml-cli build recipes become primary configs of a user config tree.
Parsing and printing only; the mapping is planner/recipes/."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.cli.common import writable_dir, write_output
from planner.core.targets import TARGETS
from planner.errors import ConfigError, UsageError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def cmd_import(args: argparse.Namespace) -> int:
    from planner.recipes import report
    from planner.recipes.convert import IMPORTED, convert
    from planner.recipes.writer import write_all

    if args.report and Path(args.report).is_dir():  # said before anything is written
        raise UsageError(f"--report {args.report}: a folder; --report names the Markdown file "
                         "to write (e.g. --report import.md)")
    groups, single = _groups(args.recipe)
    builds = [convert(g, args.target, args.model_id) for g in groups]
    shown = args.output.rstrip("/") or "."
    if any(b.status == IMPORTED for b in builds):
        progress = None if single or args.quiet or args.json else \
            (lambda line: print(line, file=sys.stderr, flush=True))
        write_all(builds, writable_dir(Path(args.output), "-o"), shown, args.force, progress)
    if args.report:
        write_output(Path(args.report), report.markdown(builds, shown))
    if args.json:
        print(json.dumps(report.to_json(builds, shown), indent=2))
    elif single:
        _print_one(builds[0], shown)
    else:
        sys.stdout.write(report.text_table(builds, shown))
        print(report.summary(builds) + (f" Report: {args.report}." if args.report else ""))
        for line in report.warnings(builds, shown=2):
            print(f"Will not plan yet: {line}")
        _hint(next((b for b in builds if b.status == IMPORTED), None), shown)
    failed = [b for b in builds if b.status != IMPORTED]
    if single and failed:
        raise ConfigError(f"{failed[0].shown}: {failed[0].message}")
    return 1 if failed else 0


def _groups(recipe: str) -> tuple[list[Any], bool]:
    """The builds a path names (a file and its encoder/decoder sibling, or every recipe under
    a directory), and whether it named one file."""
    from planner.recipes import layout

    source = Path(recipe)
    if not source.exists():
        raise UsageError(f"{recipe}: no such file or directory; give a recipe "
                         "(*_config.json) or a directory of them")
    if source.is_file():
        return [layout.with_sibling(_one(source))], True
    groups = layout.builds(layout.find_recipes(source.resolve()))
    if not groups:
        raise UsageError(f"{recipe}: no recipes (*_config*.json) under it")
    return groups, False


def _one(path: Path) -> Any:
    from planner.recipes import layout

    f = layout.recipe_file(path)
    up = 3 if f.ep else 1  # the folder above the model's: paths then read org_name/...
    parents = f.path.parents
    return layout.recipe_file(path, parents[up] if len(parents) > up else None)


def _print_one(build: Any, out: str) -> None:
    from planner.recipes import report
    from planner.recipes.convert import IMPORTED

    if build.status != IMPORTED:
        return
    print(f"Imported {build.shown}")
    print(f"  -> {out}/{build.name}.yaml  ("
          + " ".join(f"{g}={o}" for g, o in build.draft.choices.items()) + ")")
    for e in build.entries:
        print(f"  {report.entry_line(e)}")
    print(f"{report.counts(build)}.")
    for w in build.warnings:
        print(f"Will not plan yet: {w}")
    _hint(build, out)


def _hint(build: Any, out: str) -> None:
    if build is None:
        return
    how = f"--config-dir {out} --config-name {build.name}"
    print(f"Plan it:  modelplan plan {how}")
    print(f"Build it: modelplan run {how} model.path=/path/to/checkpoint")


COMMANDS["import"] = cmd_import


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add `import` to the `modelplan` subparsers (`common`: the shared flags)."""
    sp = sub.add_parser("import", parents=[common], help="turn winml-cli build recipes into "
                        "configs of your config tree (every field mapped or reported)")
    sp.set_defaults(handler=cmd_import)
    sp.add_argument("recipe", metavar="RECIPE.json|DIR",
                    help="a winml-cli build recipe, or a directory of them (one row each)")
    sp.add_argument("-o", "--output", default="conf", metavar="DIR",
                    help="the config tree to write into: DIR/<name>.yaml, a primary config for "
                    "--config-dir DIR --config-name <name> (default: conf)")
    sp.add_argument("--target", choices=list(TARGETS),
                    help="build for this target whatever the recipe's folder says (also imports "
                    "recipes for targets modelplan does not build)")
    sp.add_argument("--model-id", metavar="ORG/NAME",
                    help="the Hugging Face model id, when neither the folder name nor "
                    "quant.model_id gives it")
    sp.add_argument("--force", action="store_true",
                    help="overwrite configs of the same name that modelplan import did not write")
    sp.add_argument("--report", metavar="FILE", help="also write the table and every field's "
                    "outcome as Markdown")
    sp.add_argument("--json", action="store_true", help="print the outcome of every recipe as "
                    "JSON")
    sp.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
