"""The `modelplan` commands that read what was planned, run or exported, without running
anything: diff (two plans, two run records, or a git revision's configs), report (a run
record's modules), inspect (what a model is and what its build exports)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.cli.common import config_tree
from planner.errors import ModelplanError, UsageError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    COMMANDS[fn.__name__.removeprefix("cmd_")] = fn
    return fn


@command
def cmd_diff(args: argparse.Namespace) -> int:
    if args.rev is not None:
        from planner.cli.review import diff_rev

        config_tree(args)
        return diff_rev(args)
    if len(args.overrides) != 2 or args.multirun or args.config_dir or args.config_name:
        raise UsageError("diff: give two saved plans or run records (OLD.json NEW.json), or "
                         "--rev BASE and overrides to plan a git revision against the working "
                         "tree")
    args.a, args.b = args.overrides
    from planner.core.planfile import check_plan, read_plan_json
    from planner.review.diff import diff, render_md, render_text

    plans = []
    for path in args.overrides:
        ir = read_plan_json(Path(path))
        plans.append(ir)
    if _diff_runs(args, plans):
        return 0
    for path, ir in zip((args.a, args.b), plans, strict=True):
        check_plan(ir, path, tools="plan")  # an edited plan would make the diff a lie
    d = diff(*plans)
    out = {"text": render_text, "md": render_md}.get(args.format)
    from planner.cli.review import emit

    emit(out(d) if out else json.dumps(d, indent=2) + "\n", args.output,
         f"Diff written to {args.output} ({args.format}).")
    return 0


def _diff_runs(args: argparse.Namespace, docs: list[Any]) -> bool:
    """Diff two run records (True), or leave two plans to the plan diff (False)."""
    from planner.review import rundiff

    runs = [rundiff.is_run_record(d) for d in docs]
    if not any(runs):
        return False
    if not all(runs):
        raise UsageError(f"{args.a if runs[0] else args.b} is a run record and "
                         f"{args.b if runs[0] else args.a} is not; diff two plans or two run "
                         "records")
    for path, doc in zip((args.a, args.b), docs, strict=True):
        rundiff.check_record(doc, path)
    d = rundiff.diff(*docs)
    render = {"text": rundiff.render_text, "md": rundiff.render_md}.get(args.format)
    sys.stdout.write(render(d) if render else json.dumps(d, indent=2) + "\n")
    return True


@command
def cmd_report(args: argparse.Namespace) -> int:
    from planner.render.run import markdown, table
    from planner.review import rundiff

    if Path(args.record).is_dir() or Path(args.record).name == rundiff.SWEEP:
        return _report_sweep(args)
    record = rundiff.load_record(args.record)
    if args.format == "json":
        print(json.dumps({"run_id": record["run_id"], "modules": record.get("modules", [])},
                         indent=2))
    else:
        sys.stdout.write(markdown(record) if args.format == "md" else table(record, None))
    return 0


def _report_sweep(args: argparse.Namespace) -> int:
    """`report <sweep dir>`: the results table and the accuracy matrix across its jobs."""
    from planner.render import sweep
    from planner.render.results import rows
    from planner.review import rundiff

    summary = rundiff.load_sweep(args.record)
    if args.format == "json":
        print(json.dumps(rows(summary), indent=2))
    else:
        sys.stdout.write(sweep.report_markdown(summary) if args.format == "md"
                         else sweep.report_text(summary))
    return 0


@command
def cmd_inspect(args: argparse.Namespace) -> int:
    from planner.config.compose import compose
    from planner.config.validate import check_config
    from planner.render.model_info import describe, render

    config = compose(args.overrides, config_tree(args))
    check_config(config)
    described = describe(config)
    if args.hierarchy:
        if described["task"] is None:
            raise UsageError("inspect --hierarchy: an ONNX file has no module hierarchy to "
                             "trace; inspect a torch checkpoint")
        from planner.cli.app import inspect_hierarchy

        described["hierarchy"] = _traced(inspect_hierarchy, described, config)
    print(json.dumps(described, indent=2, default=str) if args.json else render(described),
          end="" if not args.json else "\n")
    return 0


def _traced(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a trace, turning a torch or transformers failure into one line with a fix."""
    try:
        return fn(*args)
    except ModelplanError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"inspect --hierarchy: tracing the model failed ({first}); rerun with "
                         "--debug for the traceback, or inspect without --hierarchy") from exc


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register diff, report and inspect with the CLI's `add` (name, help, overrides, handler)."""
    sp = add("diff", "what changes between two saved plans or two run records (latency per "
             "perf step and module), or between a git revision's configs and the working "
             "tree's (--rev)", overrides=True, handler=cmd_diff)
    sp.add_argument("--rev", metavar="BASE", help="plan the config dirs as they are at git "
                    "revision BASE and as they are in the working tree, and diff the plans; "
                    "positional arguments are then overrides")
    sp.add_argument("-m", "--multirun", action="store_true",
                    help="with --rev: diff every job of a sweep")
    sp.add_argument("--format", choices=["text", "md", "json"], default="text")
    sp.add_argument("-o", "--output", metavar="FILE", help="write the diff to FILE")

    sp = add("report", "a run record's steps, its accuracy and where the time goes, per "
             "module; or a sweep directory's results and accuracy matrix", handler=cmd_report)
    sp.add_argument("record", metavar="RUN.json|SWEEP_DIR")
    sp.add_argument("--format", choices=["text", "md", "json"], default="text")

    sp = add("inspect", "what a model is and what its build exports, without exporting",
             overrides=True, handler=cmd_inspect)
    sp.add_argument("--hierarchy", action="store_true",
                    help="also the module tree, with node counts, from a random-weight trace")
    sp.add_argument("--json", action="store_true", help="print JSON")
