"""Config-review commands of the `modelplan` CLI: `diff --rev`, `review` (the GitHub Action's
command), `validate` (the pre-commit hooks) and `schema` (editor support). Parsing and
printing only; the work is in planner.review.comment, planner.config.confcheck and planner.config.editor_schema."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.cli.common import writable_dir, write_output
from planner.errors import ConfigError, UsageError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def _command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    COMMANDS[fn.__name__.removeprefix("cmd_")] = fn
    return fn


def emit(text: str, output: str | None, done: str) -> None:
    """Print `text`, or write it whole to `output` and say `done`."""
    if output:
        write_output(Path(output), text)
        print(done)
    else:
        sys.stdout.write(text)


def render_review(rv: Any, fmt: str) -> str:
    from planner.review import report as render

    data = rv.to_json()
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "md":
        return render.render_md(data, {j.index: j.head.ir for j in rv.jobs if j.head.ir})
    return render.render_text(data)


def diff_rev(args: argparse.Namespace) -> int:
    """`modelplan diff --rev BASE [overrides]`: the config tree at BASE against the working tree."""
    from planner.review.comment import review
    from planner.review.report import summary

    if args.config_dir and not args.tree.user_dirs:  # each one is the packaged tree itself
        raise UsageError(
            f"--rev: --config-dir {args.config_dir[0]} is the config tree modelplan itself "
            "ships, which --rev does not check out at a revision; give the folder of your own "
            "config groups (e.g. myconf), or plan both revisions with `modelplan plan --format "
            "json -o old.json` (and -o new.json) and compare them with "
            "`modelplan diff old.json new.json`")
    rv = review(args.rev, args.overrides, args.tree, args.multirun)
    emit(render_review(rv, args.format), args.output,
         f"{summary(rv.to_json())} Written to {args.output} ({args.format}).")
    if rv.head_errors:
        raise ConfigError(*rv.head_errors)
    return 0


@_command
def cmd_review(args: argparse.Namespace) -> int:
    """The GitHub Action's command: diff --rev for every config line, one comment body."""
    from planner.review import ghcomment
    from planner.review.comment import review

    lines = _config_lines(Path(args.configs))
    parts, texts, failures, changed = [], [], [], 0
    for line in lines:
        tree, overrides, multirun = _line_tree(args, line)
        try:
            rv = review(args.rev, overrides, tree, multirun)
        except ConfigError as exc:
            failures += [f"{line}: {m}" for m in exc.lines]
            parts += [f"### `{line}`", "", *[f"> **error:** {m}" for m in exc.lines], ""]
            continue
        parts.append(render_review(rv, "md"))
        texts.append(render_review(rv, "text"))
        failures += [f"{line}: {m}" for m in rv.head_errors]
        changed += any(j.changed for j in rv.jobs)
    head = (f"## modelplan review\n\n{len(lines)} config(s) reviewed: {changed} with changes, "
            f"{len(failures)} error(s).\n")
    body = "\n".join([head, *parts]).rstrip("\n") + "\n"
    sys.stdout.write("\n".join(texts))
    if args.output:
        write_output(Path(args.output), body)
        print(f"Review of {len(lines)} config(s) written to {args.output}.")
    if args.post:
        url = ghcomment.post(body, args.comment_key, ghcomment.pr_number(args.pr))
        print(f"Review comment: {url}")
    if failures:
        raise ConfigError(*failures)
    return 0


def _config_lines(path: Path) -> list[str]:
    """The configs to review: one per line (overrides, -m, --config-name NAME); # comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--configs {path}: cannot read it ({exc.strerror or exc}); write "
                          "one config per line, e.g. `model=our_vit quant=w8a16`") from exc
    lines = [ln.split(" #")[0].strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if not lines:
        raise ConfigError(f"--configs {path}: no configs in it; write one per line, e.g. "
                          "`model=our_vit quant=w8a16`")
    return lines


def _line_tree(args: argparse.Namespace, line: str) -> tuple[Any, list[str], bool]:
    """The tree, overrides and -m of one --configs line."""
    import shlex

    from planner.config.conftree import from_cli

    p = argparse.ArgumentParser(prog=f"--configs line '{line}'", add_help=False)
    p.add_argument("-m", "--multirun", action="store_true")
    p.add_argument("--config-name")
    try:
        known, overrides = p.parse_known_args(shlex.split(line))
    except (ValueError, SystemExit) as exc:
        raise ConfigError(f"--configs line '{line}': cannot parse it; write overrides, "
                          "optionally -m and --config-name NAME") from exc
    tree, overrides = from_cli(args.config_dir, known.config_name or args.config_name, overrides)
    return tree, overrides, known.multirun


@_command
def cmd_validate(args: argparse.Namespace) -> int:
    """The pre-commit hooks: changed config files compose, validate and (--plan) plan."""
    from planner.config.confcheck import check_files
    from planner.config.conftree import from_cli

    tree, _ = from_cli(args.config_dir or ["conf"], None, [])
    checked, errors = check_files(args.files, tree, args.plan)
    if errors:
        raise ConfigError(*errors)
    what = "plan without a reject" if args.plan else "compose and validate"
    print(f"modelplan validate: {checked} config file(s) {what}.")
    return 0


@_command
def cmd_schema(args: argparse.Namespace) -> int:
    """JSON Schemas for YAML editors: one per group, one for primary/experiment files."""
    from planner.config import editor_schema

    if not args.write:
        print(json.dumps(editor_schema.group_schema(args.group) if args.group != "config"
                         else editor_schema.root_schema(), indent=2))
        return 0
    written = editor_schema.write(writable_dir(Path(args.write), "--write"))
    for path in written:
        print(path)
    print(f"Wrote {len(written)} schemas. Put `# yaml-language-server: $schema=<path to "
          "model.schema.json>` at the top of conf/model/*.yaml (and so on per group).")
    return 0


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the review commands to the `modelplan` subparsers (`common`: the shared flags)."""
    from planner.config.compose import GROUPS

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=[common], help=help_text)
        sp.set_defaults(handler=COMMANDS[name])
        return sp

    sp = add("review", "diff --rev for every config a file names, as one pull-request "
             "comment (the GitHub Action's command)")
    sp.add_argument("--rev", required=True, metavar="BASE", help="the base git revision")
    sp.add_argument("--configs", required=True, metavar="FILE",
                    help="one config per line: overrides, optionally -m and --config-name NAME")
    sp.add_argument("--config-dir", action="append", metavar="DIR", required=True,
                    help="the config tree your repository keeps (read at both revisions)")
    sp.add_argument("--config-name", metavar="NAME", help="primary config for every line")
    sp.add_argument("-o", "--output", metavar="FILE", help="write the comment body to FILE")
    sp.add_argument("--post", action="store_true", help="create or update the pull-request "
                    "comment (GITHUB_TOKEN, GITHUB_REPOSITORY and the event from the workflow)")
    sp.add_argument("--pr", type=int, metavar="N", help="pull request number (default: the "
                    "workflow event's)")
    sp.add_argument("--comment-key", default="", metavar="KEY",
                    help="tells apart the comments of several reviews on one pull request")

    sp = add("validate", "check config files: each composes and validates (--plan: and "
             "plans without a reject); for pre-commit")
    sp.add_argument("files", nargs="*", metavar="FILE", help="config files (others are skipped)")
    sp.add_argument("--config-dir", action="append", metavar="DIR",
                    help="the config tree the files belong to (default: conf)")
    sp.add_argument("--plan", action="store_true", help="also plan each config (symbolic "
                    "source keys where a checkpoint cannot be read); a reject is an error")

    sp = add("schema", "JSON Schemas of the config groups for YAML editors")
    sp.add_argument("group", nargs="?", default="config", choices=["config", *GROUPS],
                    help="print this group's schema (default: primary/experiment files)")
    sp.add_argument("--write", metavar="DIR", help="write every group's schema into DIR")
