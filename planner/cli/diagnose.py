"""`modelplan diagnose [overrides]`: where a quantized build loses accuracy, per module.

The config is planned as given (its verify step names the fp32 reference and the quantized
candidate), then run with verify, perf and eval off (the same keys up to the tagged QDQ
graph, so a built store answers at once), and the executor compares the two graphs tensor by
tensor on the verify inputs."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.cli.common import config_tree, non_negative, positive
from planner.core import diagnosis
from planner.errors import UsageError

MEASURES = ("verify", "perf", "eval")  # off in the run: diagnose measures on its own


def _plans(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the plan as configured, the plan diagnose runs: its measurements off)."""
    from planner.config.compose import compose_timed
    from planner.planning import plan_for

    tree = config_tree(args)
    given = [o for o in args.overrides if o.lstrip("+~") != "verify=none"]  # verify names roles
    full = compose_timed(given, store=args.store, tree=tree, timings=args.timings)
    _quantized(full, args.overrides)
    kept = [o for o in args.overrides
            if o.split("=", 1)[0].lstrip("+~").split(".", 1)[0] not in MEASURES]
    built = compose_timed([*kept, *(f"{m}=none" for m in MEASURES)], store=args.store,
                          tree=tree, timings=args.timings)
    return plan_for(full).to_json(), plan_for(built).to_json()


def _quantized(config: dict[str, Any], overrides: list[str]) -> None:
    """Refuse a config that builds no quantized graph before planning it: the planner's own
    fix for quant=none on an NPU (target=cpu) would build nothing to diagnose either."""
    if config["quant"]["name"] != "none":
        return
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~").split(".", 1)[0] != "quant"]
    command = shlex.join(["modelplan", "diagnose", *kept, "quant=w8a16_pc"])
    raise UsageError("diagnose: quant=none builds no quantized graph, and diagnose compares a "
                     "quantized graph with its fp32 reference; set another quant, e.g. "
                     f"`{command}`")


def _roles(ir: dict[str, Any]) -> tuple[str, str, str | None]:
    """(reference step, tagged quantized step, resolve step) from the plan's verify step."""
    verify = next((s for s in ir["steps"] if s["op"] == "verify"), None)
    if not any(s["op"] == "quantize" for s in ir["steps"]) or verify is None:
        raise UsageError("diagnose: the plan has no quantize or no verify step; diagnose "
                         "compares a quantized graph with its fp32 reference (set quant=w8a8 "
                         "or another quant)")
    found = diagnosis.roles(ir, verify["id"])
    if found is None:
        raise UsageError("diagnose: the plan tags no quantized graph")
    return found


def _entry(ir: dict[str, Any], record: dict[str, Any], step_id: str) -> Path:
    """The store entry a step's output is in; an elided step's is its model input's."""
    found = diagnosis.entry(ir, record["steps"], step_id)
    if found is None:
        raise UsageError(f"diagnose: step {step_id} has no output")
    return found


def cmd_diagnose(args: argparse.Namespace) -> int:
    from planner.cli.app import RunOptions, diagnose_accuracy, run_plan
    from planner.render import module_error

    for name in ("samples", "top", "target_pieces", "target_samples"):
        value = getattr(args, name)
        if value is not None and not isinstance(value, int):  # argparse drops a bare `--`
            raise UsageError(f"diagnose --{name.replace('_', '-')}: give a whole number")
    full, built = _plans(args)
    reference, candidate, source = _roles(full)
    missing = [s for s in (reference, candidate, source) if s and s not in
               {b["id"] for b in built["steps"]}]
    if missing:
        raise UsageError(f"diagnose: step(s) {', '.join(missing)} not in the plan without "
                         "verify, perf and eval")
    record = run_plan(built, None, [], RunOptions(
        store=Path(args.store).resolve() if args.store else None, quiet=args.quiet,
        debug=args.debug))
    if record["error"]:
        raise UsageError(f"diagnose: the build failed: {record['error']['message']}")
    samples = args.samples if args.samples is not None else \
        full["config"]["verify"].get("samples") or 4
    result = diagnose_accuracy(full["config"], _entry(built, record, reference) / "model.onnx",
                               _entry(built, record, candidate) / "model.onnx",
                               _entry(built, record, source) if source else None, samples,
                               _target_pieces(args, full["config"]), args.target_samples,
                               args.quiet)
    result |= {"reference_step": reference, "candidate_step": candidate,
               "quant": full["config"]["quant"]["name"],
               "target": full["config"]["target"]["name"]}
    if args.json:
        print(json.dumps(_finite(result), indent=2))
    else:
        sys.stdout.write(module_error.text(result, args.top or None))
    return 0


def _target_pieces(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """How many pieces run on the target: --target-pieces, or 3 for --on target."""
    n = args.target_pieces if args.target_pieces is not None else \
        (3 if args.on == "target" else 0)
    if n and config["target"]["ep"] == "cpu":
        raise UsageError("diagnose: the config's target is the CPU, where the pieces already "
                         "ran; set target=qnn_htp to run them on the NPU")
    return n


def _finite(value: Any) -> Any:
    """JSON without Infinity: an exact match's SQNR is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


COMMANDS = {"diagnose": cmd_diagnose}


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    sp = add("diagnose", "rank a quantized build's modules by their error against fp32: builds "
             "the config up to its tagged QDQ graph, then ranks its modules by SQNR and cosine "
             "against the fp32 graph", overrides=True,
             handler=cmd_diagnose)
    sp.add_argument("--store", metavar="DIR", help="the content-addressed store "
                    "(default: store.path, else ~/.cache/modelplan/store)")
    sp.add_argument("--samples", type=positive, metavar="N",
                    help="verify inputs to compare on (default: verify.samples)")
    sp.add_argument("--top", type=non_negative, default=15, metavar="N",
                    help="modules in the ranked table (0: all; default 15)")
    sp.add_argument("--json", action="store_true", help="print the rows as JSON")
    sp.add_argument("--on", choices=("cpu", "target"), default="cpu",
                    help="target: also run the 3 worst modules' pieces on the config's "
                    "target (as --target-pieces 3)")
    sp.add_argument("--target-pieces", type=non_negative, metavar="N",
                    help="run the N worst modules' pieces (by own CPU error, innermost "
                    "modules) compiled for the config's target; the HTP simulator takes "
                    "seconds per inference")
    sp.add_argument("--target-samples", type=positive, default=2, metavar="N",
                    help="inputs each target piece runs on (default 2)")
    sp.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
