"""The `modelplan` command line: parses arguments, calls the planner or an executor, prints.

Errors are ModelplanError lines printed once here; a traceback only with --debug.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import ModelplanError, UsageError

T0 = time.perf_counter()
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    COMMANDS[fn.__name__.removeprefix("cmd_")] = fn
    return fn


def write_atomic(path: Path, text: str) -> None:
    """Write a file whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "it is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"{path}: cannot write it ({exc.strerror or exc}); "
                         "choose another -o FILE") from exc


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


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


@command
def cmd_plan(args: argparse.Namespace) -> int:
    tree = config_tree(args)
    if args.multirun:
        return _plan_sweep(args)
    from planner.compose import compose_timed

    config = compose_timed(args.overrides, store=args.store, tree=tree)  # Hydra imports first
    from planner.build import plan_for
    from planner.render import render

    ir = plan_for(config, symbolic=args.symbolic_sources).to_json()
    out = render(ir, args.format)
    if args.output:
        from planner.render.common import summary_line

        write_atomic(Path(args.output), out)
        print(f"{summary_line(ir)} Written to {args.output} ({args.format}).")
    else:
        sys.stdout.write(out)
    return 0


def _plan_sweep(args: argparse.Namespace) -> int:
    from planner.render import sweep as render_sweep
    from planner.sweep import plan_sweep

    if args.format not in ("text", "json"):
        raise UsageError(f"plan -m --format {args.format}: a sweep plan is text or json; "
                         "plan one job for md or mermaid")
    data = plan_sweep(args.overrides, store=args.store, tree=args.tree,
                      symbolic=args.symbolic_sources).to_json()
    errors = [f"job {j['index']} ({' '.join(j['overrides'])}): {j['error']}"
              for j in data["jobs"] if j["error"]]
    if errors:  # a dry run exists to find these: report them and write nothing
        raise UsageError(*errors)
    out = json.dumps(data, indent=2) + "\n" if args.format == "json" else render_sweep.render(data)
    if args.output:
        write_atomic(Path(args.output), out)
        print(out.strip().splitlines()[-1] if args.format != "json" else
              f"Sweep plan written to {args.output}.")
    else:
        sys.stdout.write(out)
    return 0


@command
def cmd_diff(args: argparse.Namespace) -> int:
    if args.rev is not None:
        from planner.cli_review import diff_rev

        config_tree(args)
        return diff_rev(args)
    if len(args.overrides) != 2 or args.multirun or args.config_dir or args.config_name:
        raise UsageError("diff: give two saved plans (OLD.json NEW.json), or --rev BASE and "
                         "overrides to plan a git revision against the working tree")
    from executors.plan_io import check_plan
    from planner.diff import diff, render_md, render_text
    from planner.errors import PlanFileError

    plans = []
    for path in args.overrides:
        try:
            ir = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise PlanFileError(f"{path}: not a readable plan ({exc}); write one with "
                                "`modelplan plan --format json -o FILE`") from exc
        check_plan(ir, path, tools="plan")  # an edited plan would make the diff a lie
        plans.append(ir)
    d = diff(*plans)
    out = {"text": render_text, "md": render_md}.get(args.format)
    from planner.cli_review import emit

    emit(out(d) if out else json.dumps(d, indent=2) + "\n", args.output,
         f"Diff written to {args.output} ({args.format}).")
    return 0


@command
def cmd_config(args: argparse.Namespace) -> int:
    from planner.compose import compose
    from planner.validate import check_config

    config = compose(args.overrides, config_tree(args))
    check_config(config)
    print(json.dumps(config, indent=2) if args.json else _yaml(config), end="")
    return 0


@command
def cmd_run(args: argparse.Namespace) -> int:
    tree = config_tree(args)
    if args.multirun:
        return _run_sweep(args)
    from planner.compose import compose_timed

    config = compose_timed(args.overrides, store=args.store, tree=tree)
    from planner.build import plan_for

    return _execute(plan_for(config).to_json(), args, args.overrides)


@command
def cmd_apply(args: argparse.Namespace) -> int:
    from executors.plan_io import load_plan

    return _execute(load_plan(Path(args.plan)), args, [])


def _execute(ir: dict[str, Any], args: argparse.Namespace, overrides: list[str]) -> int:
    from executors.local import LocalExecutor
    from executors.report import table
    from executors.store import Store

    name = args.name or run_name(ir["config"])
    if not name or "/" in name or name in (".", "..") or name.startswith("."):
        raise UsageError(f"--name {name!r}: a run name is one folder name under --outputs "
                         "(no '/', not starting with '.')")
    outputs = writable_dir(Path(args.outputs), "--outputs")
    store = Store(store_dir(args, ir["config"]))
    executor = LocalExecutor(store, debug=args.debug, quiet=args.quiet)
    record = executor.run(ir, name, outputs, overrides)
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        sys.stdout.write(table(record))
    if record["error"]:
        print(f"modelplan: error: {record['error']['message']}", file=sys.stderr)
        return 1
    return 0


def _run_sweep(args: argparse.Namespace) -> int:
    from executors.store import Store
    from executors.sweep import SweepExecutor, results_table
    from planner.sweep import plan_sweep

    sweep = plan_sweep(args.overrides, store=args.store, tree=args.tree)
    first = next((j.plan for j in sweep.jobs if j.plan is not None), None)
    if first is None:
        for job in sweep.jobs:
            print(f"modelplan: error: job {job.index}: {job.error}", file=sys.stderr)
        return 2
    sweep_dir = writable_dir(Path(args.sweep_dir or time.strftime("multirun/%Y-%m-%d/%H-%M-%S")),
                             "--sweep-dir")
    store = Store(store_dir(args, first.config))
    summary = SweepExecutor(store, args.jobs or os.cpu_count() or 1, quiet=args.quiet,
                            debug=args.debug).run(sweep, sweep_dir)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        sys.stdout.write(results_table(summary))
    failed = [j for j in summary["jobs"] if j["status"] != "ok"]
    for j in failed:
        print(f"modelplan: error: job {j['index']} ({' '.join(j['overrides'])}): {j['error']}",
              file=sys.stderr)
    return 1 if failed else 0


def config_tree(args: argparse.Namespace) -> Any:
    """The config tree the command line names (--config-dir, --config-name, hydra.searchpath);
    hydra.searchpath leaves the overrides, the tree carries it. Kept as args.tree."""
    from planner.conftree import from_cli

    args.tree, args.overrides = from_cli(args.config_dir, args.config_name, args.overrides)
    return args.tree


def store_dir(args: argparse.Namespace, config: dict[str, Any]) -> Path:
    """--store DIR when given, else the config's store (store.path or the user cache dir)."""
    from planner.lower import store_root

    return Path(args.store).resolve() if args.store else store_root(config)


def run_name(config: dict[str, Any]) -> str:
    """A stable name for a config's outputs: model-quant-target."""
    return "-".join(str(config[g]["name"]) for g in ("model", "quant", "target"))


@command
def cmd_store(args: argparse.Namespace) -> int:
    from executors import store_cli
    from executors.store import Store

    root = store_dir(args, {"store": {"path": None}})
    if not root.is_dir():
        raise UsageError(f"store {root}: there is no store there; pass --store DIR of an "
                         "existing store (runs create one)")
    return store_cli.ACTIONS[args.action](Store(root), args)


def _yaml(config: dict[str, Any]) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(config))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="modelplan", description=(
        "Compile a Hydra model-build config into an explicit plan and run it on ONNX Runtime."))
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def overrides(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="Hydra overrides, e.g. model=tiny_bert quant=w8a8 export.opset=17")
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors")
        sp.add_argument("--config-dir", action="append", metavar="DIR",
                        help="a config tree of your own on top of the packaged groups "
                        "(conf/model/ours.yaml -> model=ours); may be repeated")
        sp.add_argument("--config-name", metavar="NAME",
                        help="primary config (NAME.yaml at the top of a config dir; default: "
                        "the packaged config)")

    sp = sub.add_parser("plan", help="print the plan without running anything")
    overrides(sp)
    sp.add_argument("--symbolic-sources", action="store_true",
                    help="plan a model whose checkpoint cannot be read here with a symbolic "
                    "source key (for review; apply refuses such a plan)")
    sp.add_argument("-m", "--multirun", action="store_true",
                    help="plan every job of a sweep (a=x,y b=z,w) as one merged DAG")
    sp.add_argument("--format", choices=["text", "json", "md", "mermaid"], default="text")
    sp.add_argument("-o", "--output", metavar="FILE", help="write the plan to FILE")
    sp.add_argument("--store", metavar="DIR", help="the store to check for cached steps")

    def running(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--store", metavar="DIR", help="the content-addressed store "
                        "(default: store.path, else ~/.cache/modelplan/store)")
        sp.add_argument("--outputs", metavar="DIR", default="outputs",
                        help="where stable copies of the results go (default: ./outputs)")
        sp.add_argument("--name", help="run name under --outputs (default: model-quant-target)")
        sp.add_argument("--json", action="store_true", help="print the run record as JSON")
        sp.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    sp = sub.add_parser("run", help="plan, then run the plan")
    overrides(sp)
    running(sp)
    sp.add_argument("-m", "--multirun", action="store_true",
                    help="run every job of a sweep; each distinct step runs once")
    sp.add_argument("-j", "--jobs", type=positive, metavar="N",
                    help="parallel workers for a sweep (default: the number of cores)")
    sp.add_argument("--sweep-dir", metavar="DIR",
                    help="where a sweep writes its jobs and results (default: multirun/DATE/TIME)")

    sp = sub.add_parser("apply", help="run a saved plan (modelplan plan -o plan.json)")
    sp.add_argument("plan", metavar="PLAN.json")
    sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors")
    running(sp)

    sp = sub.add_parser("store", help="inspect and maintain the store")
    sp.add_argument("action", choices=["ls", "verify", "gc"])
    sp.add_argument("--store", metavar="DIR", help="the store (default: the user cache dir)")
    sp.add_argument("--remove", action="store_true", help="verify: remove corrupt entries")
    sp.add_argument("--keep-runs", type=non_negative, default=10, metavar="N",
                    help="gc: keep entries used by the N most recent runs (default 10)")
    sp.add_argument("--dry-run", action="store_true",
                    help="gc and verify --remove: only say what would go")
    sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors")

    sp = sub.add_parser("diff", help="what changes between two saved plans, or between a "
                        "git revision's configs and the working tree's (--rev)")
    overrides(sp)
    sp.add_argument("--rev", metavar="BASE", help="plan the config dirs as they are at git "
                    "revision BASE and as they are in the working tree, and diff the plans; "
                    "positional arguments are then overrides")
    sp.add_argument("-m", "--multirun", action="store_true",
                    help="with --rev: diff every job of a sweep")
    sp.add_argument("--format", choices=["text", "md", "json"], default="text")
    sp.add_argument("-o", "--output", metavar="FILE", help="write the diff to FILE")

    sp = sub.add_parser("config", help="print the resolved, validated config")
    overrides(sp)
    sp.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    from planner import cli_review

    cli_review.add_commands(sub, overrides)
    COMMANDS.update(cli_review.COMMANDS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args, extra = p.parse_known_args(argv)
    unknown = [x for x in extra if x.startswith("-")]
    if unknown:
        p.error(f"unrecognized option(s): {' '.join(unknown)}")
    if hasattr(args, "overrides"):
        args.overrides = list(args.overrides) + extra
    elif extra:
        p.error(f"unexpected argument(s) for {args.command}: {' '.join(extra)}")
    try:
        code = COMMANDS[args.command](args)
    except ModelplanError as exc:
        if args.debug:
            raise
        for line in exc.lines:
            print(f"modelplan: error: {line}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("modelplan: interrupted", file=sys.stderr)
        code = 130
    if os.environ.get("MODELPLAN_TIMINGS"):
        _print_timings()
    return code


def _print_timings() -> None:
    from planner.compose import TIMINGS

    report = {**TIMINGS, "total_s": time.perf_counter() - T0}
    print("modelplan-timings " + json.dumps(report), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
