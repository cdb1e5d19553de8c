"""The `modelplan` command line: parses arguments, calls the planner or the application layer
(planner/cli/app.py, which finds the executor plugin), prints.

Errors are ModelplanError lines printed once here; a traceback only with --debug.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.cli import server  # before the rest: a command it runs needs nothing else here
from planner.cli.common import config_tree, positive, results_dir, write_output
from planner.errors import ModelplanError, UsageError

T0 = time.perf_counter()
WIDE = functools.partial(argparse.HelpFormatter, width=100, max_help_position=24)
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    COMMANDS[fn.__name__.removeprefix("cmd_")] = fn
    return fn


@command
def cmd_plan(args: argparse.Namespace) -> int:
    args.format = plan_format(args.format, args.output)
    tree = config_tree(args)
    if args.multirun:
        return _plan_sweep(args)
    from planner.config.compose import compose_timed

    config = compose_timed(args.overrides, store=args.store, tree=tree, timings=args.timings)  # Hydra imports first
    from planner.planning import plan_for
    from planner.render import render

    ir = plan_for(config, symbolic=args.symbolic_sources, timings=args.timings).to_json()
    out = render(ir, args.format)
    if args.output:
        from planner.render.common import summary_line

        write_output(Path(args.output), out)
        print(f"{summary_line(ir)} Written to {args.output} ({args.format}).")
    else:
        sys.stdout.write(out)
    return 0


SUFFIX_FORMATS = {".json": "json", ".md": "md", ".mmd": "mermaid"}


def plan_format(chosen: str | None, output: str | None) -> str:
    """--format, else what -o's suffix says (plan.json is JSON, which `apply` reads), else text.
    A .json file that would not hold JSON is refused: `apply` and `diff` would not read it."""
    implied = SUFFIX_FORMATS.get(Path(output).suffix.lower()) if output else None
    if chosen and implied == "json" and chosen != "json":
        raise UsageError(f"-o {output} --format {chosen}: a .json file holds the plan as JSON; "
                         f"drop --format, or write {chosen} to a file of another suffix")
    return chosen or implied or "text"


def _plan_sweep(args: argparse.Namespace) -> int:
    from planner.planning import plan_sweep
    from planner.support.heap import collector_paused

    if args.format not in ("text", "json"):
        raise UsageError(f"plan -m --format {args.format}: a sweep plan is text or json; "
                         "plan one job for md or mermaid")
    with collector_paused(then_freeze=True):  # the command ends after printing
        sweep = plan_sweep(args.overrides, store=args.store, tree=args.tree,
                           symbolic=args.symbolic_sources, timings=args.timings)
        return _print_sweep(args, sweep.to_json(whole_plans=args.format == "json"))


def _print_sweep(args: argparse.Namespace, data: dict[str, Any]) -> int:
    from planner.render import sweep as render_sweep

    errors = [f"job {j['index']} ({' '.join(j['overrides'])}): {j['error']}"
              for j in data["jobs"] if j["error"]]
    if errors:  # a dry run exists to find these: report them and write nothing
        raise UsageError(*errors)
    if args.format == "json":  # written a job at a time: 10,000 jobs are 300 MB of JSON
        if args.output:
            write_output(Path(args.output), render_sweep.json_pieces(data))
            print(f"Sweep plan written to {args.output}.")
        else:
            sys.stdout.writelines(render_sweep.json_pieces(data))
        return 0
    out = render_sweep.render(data)
    if args.output:
        write_output(Path(args.output), out)
        print(out.strip().splitlines()[-1])
    else:
        sys.stdout.write(out)
    return 0


@command
def cmd_config(args: argparse.Namespace) -> int:
    from planner.config.compose import compose
    from planner.config.validate import check_config

    config = compose(args.overrides, config_tree(args))
    check_config(config)
    print(json.dumps(config, indent=2) if args.json else _yaml(config), end="")
    return 0


@command
def cmd_run(args: argparse.Namespace) -> int:
    tree = config_tree(args)
    from planner.cli.app import warm_up

    warm_up(args.overrides)  # the workers' imports overlap with composing and planning
    if args.multirun:
        return _run_sweep(args)
    from planner.config.compose import compose_timed

    config = compose_timed(args.overrides, store=args.store, tree=tree, timings=args.timings)
    from planner.planning import plan_for

    return _execute(plan_for(config, timings=args.timings).to_json(), args, args.overrides)


@command
def cmd_apply(args: argparse.Namespace) -> int:
    from planner.core.planfile import Trust, load_plan
    from planner.core.storelayout import store_root

    store = store_root({"store": {"path": args.store}}) if args.store else None
    roots = (store or store_root({"store": {"path": None}}), Path(args.outputs).resolve(),
             *(Path(p).expanduser().resolve() for p in args.allow_path))
    return _execute(load_plan(Path(args.plan), Trust(roots, store, args.trust_remote_code)),
                    args, [])


def _options(args: argparse.Namespace) -> Any:
    from planner.cli.app import RunOptions

    jobs = {"jobs": args.jobs} if getattr(args, "jobs", None) else {}
    return RunOptions(store=Path(args.store).resolve() if args.store else None,
                      quiet=args.quiet, debug=args.debug, executor=jobs)


def _execute(ir: dict[str, Any], args: argparse.Namespace, overrides: list[str]) -> int:
    from planner.cli.app import run_plan
    from planner.outputs import check_destination, check_name, run_name
    from planner.render.run import markdown, table

    name = run_name(ir["config"]) if args.name is None else args.name
    check_name(name)
    outputs = results_dir(args.outputs, "--outputs")
    check_destination(outputs / name, ir, args.overwrite)
    record = run_plan(ir, outputs / name, overrides, _options(args))
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        sys.stdout.write(markdown(record) if args.format == "md" else table(record))
    if record["error"]:
        print(f"modelplan: error: {record['error']['message']}", file=sys.stderr)
        return 128 + signal.Signals[record["interrupted_by"]] \
            if record["status"] == "interrupted" else 1
    return 0


def _run_sweep(args: argparse.Namespace) -> int:
    from planner.cli.app import run_sweep
    from planner.planning import plan_sweep
    from planner.render.results import table

    sweep = plan_sweep(args.overrides, store=args.store, tree=args.tree, timings=args.timings)
    first = next((j.plan for j in sweep.jobs if j.plan is not None), None)
    if first is None:
        for job in sweep.jobs:
            print(f"modelplan: error: job {job.index}: {job.error}", file=sys.stderr)
        return 2
    sweep_dir = results_dir(time.strftime("multirun/%Y-%m-%d/%H-%M-%S")
                            if args.sweep_dir is None else args.sweep_dir, "--sweep-dir")
    summary = run_sweep(sweep, sweep_dir, _options(args))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        sys.stdout.write(table(summary))
    failed = [j for j in summary["jobs"] if j["status"] != "ok"]
    for j in failed:
        print(f"modelplan: error: job {j['index']} ({' '.join(j['overrides'])}): {j['error']}",
              file=sys.stderr)
    return 1 if failed else 0


def _yaml(config: dict[str, Any]) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(config))


def _running_options(sp: argparse.ArgumentParser) -> None:
    """The options of the commands that run a plan (run, apply)."""
    sp.add_argument("--store", metavar="DIR", help="the content-addressed store "
                    "(default: store.path, else ~/.cache/modelplan/store)")
    sp.add_argument("--outputs", metavar="DIR", default="outputs",
                    help="where stable copies of the results go (default: ./outputs)")
    sp.add_argument("--name", help="run name under --outputs (default: model-quant-target, "
                    "the model named after its checkpoint folder, ONNX file or hub id)")
    sp.add_argument("--overwrite", action="store_true",
                    help="publish over a folder that holds another model's deliverable")
    sp.add_argument("--json", action="store_true", help="print the run record as JSON")
    sp.add_argument("--format", choices=["text", "md"], default="text",
                    help="the run's table and modules as text, or Markdown for a pull request")
    sp.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


class Parser(argparse.ArgumentParser):
    """An argument parser whose epilog is made only when help is shown (the config groups
    that `plan --help` lists are read from conf/, which a plain run need not read)."""

    epilog_source: Callable[[], str] | None = None

    def format_help(self) -> str:
        if self.epilog_source is not None:
            self.epilog = self.epilog_source()
        return super().format_help()


def one_line(text: str | None) -> str | None:
    """A command's help as the command list shows it: its first clause."""
    if not text:
        return text
    return re.split(r" \(|: |; ", text, maxsplit=1)[0]


def parser(plugins: bool = True) -> argparse.ArgumentParser:
    """The argument parser; plugins: also the commands installed executors register."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors")
    p = Parser(prog="modelplan", formatter_class=WIDE, description=(
        "Compile a Hydra model-build config into an explicit plan and run it on ONNX Runtime."),
        epilog="Every command takes --help; `modelplan plan --help` (and `run --help`) also "
        "lists every config group with its options and keys.")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           parser_class=Parser)

    def add(name: str, help_text: str, overrides: bool = False,
            handler: Callable[[argparse.Namespace], int] | None = None) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=[common], help=help_text)
        sp.set_defaults(handler=handler or COMMANDS[name])
        if overrides:
            sp.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                            help="Hydra overrides, e.g. model=tiny_bert quant=w8a8 export.opset=17")
            sp.add_argument("--config-dir", action="append", metavar="DIR",
                            help="a config tree of your own on top of the packaged groups "
                            "(conf/model/ours.yaml -> model=ours); may be repeated")
            sp.add_argument("--config-name", metavar="NAME",
                            help="primary config (NAME.yaml at the top of a config dir; "
                            "default: the packaged config)")
        return sp

    from planner.cli import diagnose, importing, read, review

    _run_commands(add)
    read.add_commands(add)
    diagnose.add_commands(add)
    review.add_commands(sub, common)
    importing.add_commands(sub, common)
    server.add_commands(sub, common)
    if plugins:
        from planner.cli.app import add_plugin_commands

        add_plugin_commands(sub, common)
    for listed in sub._choices_actions:  # one line each in the list; the whole on its own page
        own = sub.choices[listed.dest]
        own.description = own.description or listed.help
        listed.help = one_line(listed.help)
    return p


def _run_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """The commands that compose, plan and run: plan, run, apply, config."""
    sp = add("plan", "print the plan without running anything", overrides=True)
    with_config_groups(sp)
    sp.add_argument("--symbolic-sources", action="store_true",
                    help="plan a model whose checkpoint cannot be read here with a symbolic "
                    "source key (for review; apply refuses such a plan)")
    sp.add_argument("-m", "--multirun", action="store_true",
                    help="plan every job of a sweep (a=x,y b=z,w) as one merged DAG")
    sp.add_argument("--format", choices=["text", "json", "md", "mermaid"],
                    help="default: what -o FILE's suffix says (.json, .md, .mmd), else text")
    sp.add_argument("-o", "--output", metavar="FILE", help="write the plan to FILE "
                    "(plan.json: as JSON, for `modelplan apply plan.json`)")
    sp.add_argument("--store", metavar="DIR", help="the store to check for cached steps")

    sp = add("run", "plan, then run the plan", overrides=True)
    with_config_groups(sp)
    _running_options(sp)
    sp.add_argument("-m", "--multirun", action="store_true",
                    help="run every job of a sweep; each distinct step runs once")
    sp.add_argument("-j", "--jobs", type=positive, metavar="N",
                    help="steps a sweep builds at once (default: the number of cores)")
    sp.add_argument("--sweep-dir", metavar="DIR",
                    help="where a sweep writes its jobs and results (default: multirun/DATE/TIME)")

    sp = add("apply", "run a saved plan (modelplan plan -o plan.json)")
    sp.add_argument("plan", metavar="PLAN.json")
    _running_options(sp)
    sp.add_argument("--allow-path", action="append", default=[], metavar="DIR",
                    help="let the plan read or write under DIR (besides the store and "
                         "--outputs); repeatable")
    sp.add_argument("--trust-remote-code", action="store_true",
                    help="apply a plan that sets trust_remote_code: true")

    sp = add("config", "print the resolved, validated config", overrides=True)
    sp.add_argument("--json", action="store_true", help="print JSON instead of YAML")


def with_config_groups(sp: argparse.ArgumentParser) -> None:
    from planner.cli.confighelp import config_groups_help

    sp.formatter_class = argparse.RawDescriptionHelpFormatter
    sp.epilog_source = config_groups_help  # type: ignore[attr-defined]


def _needs_plugins(argv: list[str]) -> bool:
    """Plugin commands are loaded only when the command is not a core one (or for help)."""
    from planner.cli import diagnose, importing, read, review

    first = server.command_name(argv)
    return not any(first in c for c in (COMMANDS, read.COMMANDS, review.COMMANDS,
                                         importing.COMMANDS, diagnose.COMMANDS,
                                         server.COMMANDS))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if server.served(argv):  # the build server runs it warm, or None: it runs here
        code = server.run_on_server(argv)
        if code is not None:
            return code
    p = parser(plugins=_needs_plugins(argv))
    args, extra = p.parse_known_args(argv)
    unknown = [x for x in extra if x.startswith("-")]
    if unknown:
        p.error(f"unrecognized option(s): {' '.join(unknown)}")
    if hasattr(args, "overrides"):
        args.overrides = list(args.overrides) + extra
    elif extra:
        p.error(f"unexpected argument(s) for {args.command}: {' '.join(extra)}")
    args.timings = {}  # where the time goes, for MODELPLAN_TIMINGS (the planning calls fill it)
    try:
        code = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except BrokenPipeError:
        code = closed_pipe()
    except ModelplanError as exc:
        if args.debug:
            raise
        for line in exc.lines:
            print(f"modelplan: error: {line}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt as exc:  # outside a run's own handling (e.g. while planning)
        print("modelplan: interrupted", file=sys.stderr)
        code = 128 + getattr(exc, "signum", signal.SIGINT)
    if os.environ.get("MODELPLAN_TIMINGS"):
        _print_timings(args.timings)
    return code


def closed_pipe() -> int:
    """The reader of stdout went away (`modelplan store ls | head -2`): stop quietly, as a
    process killed by SIGPIPE would, and let nothing write to the closed pipe at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 128 + signal.SIGPIPE


def _print_timings(timings: dict[str, float]) -> None:
    report = {**timings, "total_s": time.perf_counter() - T0}
    print("modelplan-timings " + json.dumps(report), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
