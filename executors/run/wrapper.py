"""The step wrapper every executor runs every step through (what a step gets and returns is
executors/run/step_api.py).

`apply_step` does for each op what onnx-ir's `PassBase.__call__` does for a pass: check the
op's `requires` on its inputs, run the step (which only transforms and reports metrics), then
observe every fact the op `ensures` on the real output with the checkers of
executors/run/checkers.py, stamp the facts it observed into the artifact, and validate it.
A stamp is evidence, never a copy of the plan's claim.

`execute_step` makes a step's output exist: from the store, or built under the key's lock
into a temporary directory that becomes the entry only when complete. Where a heavy step runs
(a warm worker, a fresh child process) is the runner's to say: it passes `in_child`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import MODEL, SOURCE, problems, read_facts, stamp_file
from executors.onnx.pieces import model_dirs
from executors.run import proofs
from executors.run.checkers import Artifact, unmet_carried, unmet_ensures
from executors.run.monitor import StepMonitor
from executors.run.outcome import FAILED, OK, UNELIDED, StepOutcome, failed
from executors.run.step_api import StepContext, StepResult
from executors.store import diskfull, weights
from executors.store.content import Entry, Store
from planner import rules
from planner.core import facts as F
from planner.core.ops import OPS, FactName, Trait
from planner.core.storelayout import RESULT
from planner.errors import EnsuresError, RequiresError, StepError

BUG = "this is a modelplan bug for this model; rerun with --debug and report it"


def module_name(name: str) -> str:
    return f"executors.steps.{name}"


def has_implementation(name: str) -> bool:
    return name in OPS and importlib.util.find_spec(module_name(name)) is not None


def implementation(name: str) -> Callable[[StepContext], StepResult]:
    if name not in OPS:  # never import a module a plan names unless it is a declared op
        raise StepError(f"op '{name}' is not a modelplan op; re-plan with this version")
    return importlib.import_module(module_name(name)).run


def stamped_facts(path: Path) -> F.Facts:
    """The facts stamped into a step's output (its model, or its source description; for a
    set of pieces, the first piece: the step wrapper stamps them alike, and the parts of a cut
    graph compiled one per step get the same facts from steps alike)."""
    path = model_dirs(path)[0]
    raw = read_facts(path / MODEL) if (path / MODEL).is_file() else \
        json.loads((path / SOURCE).read_text()).get("facts") if (path / SOURCE).is_file() \
        else None
    return {FactName(k): F.Fact(v["value"], v["by"]) for k, v in (raw or {}).items()}


def premises_hold(step: dict[str, Any], src_dir: Path, src: str) -> tuple[bool, str]:
    """Re-check an elision on the real input: every fact the elided op would ensure must
    already hold there, as the checkers observe it (once per input content: proofs.py)."""
    if not rules.observed_on_input(step["proof"]["rule"]):
        return True, ("its readers establish what it ensures on their own inputs (declared; "
                      "observed on their outputs)")
    memo = proofs.memo_path(step, src_dir)
    if proofs.held_before(memo):
        return True, "premises hold on the real input (observed on this content before)"
    unmet = unmet_ensures(OPS[step["op"]], step["params"], Artifact(src_dir))
    if unmet:
        return False, f"not on the real input ({src}): {'; '.join(unmet)}"
    proofs.remember(memo, "premises hold on the real input")
    return True, "premises hold on the real input"


def check_elision(step: dict[str, Any], inputs: dict[str, Path]) -> StepOutcome:
    """An elided step's outcome: its input stands for it if the premises hold there, else
    UNELIDED (the scheduler then runs it and re-keys what follows)."""
    role = OPS[step["op"]].chain_role
    held, detail = premises_hold(step, inputs[role], step["inputs"][role])
    if not held:
        return StepOutcome(status=UNELIDED, error=detail)
    return StepOutcome(status=OK, action="elided", path=str(inputs[role]),
                       proof_check={"held": True, "detail": detail})


def apply_step(ctx: StepContext) -> StepResult:
    """Check requires, run, observe ensures, stamp, validate (see the module docstring)."""
    op, params = ctx.op, ctx.params
    given = {role: stamped_facts(path) for role, path in ctx.inputs.items()}
    unmet = F.unmet_requires(op, params, given)
    if unmet:
        req = unmet[0]
        raise RequiresError(*ctx.fail(
            f"its {req.role} input does not have {F.describe_requirement(req, params)}",
            req.fix or "re-plan: the store holds an input the plan did not expect").lines)
    with weights.blob_pool(ctx.blobs):
        result = implementation(op.name)(ctx)
        if not op.has(Trait.SINK):
            for out in _made_here(ctx):
                _observe_and_stamp(ctx, given.get(op.chain_role, {}), out)
    (ctx.out / RESULT).write_text(json.dumps({"metrics": result.metrics}, indent=2,
                                             sort_keys=True))
    return result


def _made_here(ctx: StepContext) -> list[Path]:
    """The models a step wrote: every one in its output, or, for a step of one part of a cut
    graph (compile's `part`), that part's alone. The other parts are carried as they came, hard
    links to store entries that must not be rewritten, stamped by the steps that made them."""
    dirs = model_dirs(ctx.out)
    part = ctx.params.get("part")
    return dirs if part is None else [dirs[part]]


def _observe_and_stamp(ctx: StepContext, given: F.Facts, out: Path) -> None:
    op, params = ctx.op, ctx.params
    artifact = Artifact(out)
    unmet = unmet_ensures(op, params, artifact)
    if unmet:
        raise EnsuresError(*ctx.fail(f"its output does not satisfy {unmet[0]}", BUG).lines)
    facts = F.apply(given, op, params, ctx.id)  # carried facts, and the ensured ones observed
    carried = {k: v for k, v in facts.items() if v.by != ctx.id}
    lost = unmet_carried(carried, artifact)
    if lost:
        raise EnsuresError(*ctx.fail(f"its output no longer has {lost[0]}, which {op.name} is "
                                     "declared to keep from its input", BUG).lines)
    stamp_file(out, F.to_json(facts), ctx.id, ctx.step["key"])
    model = out / MODEL
    if model.is_file():
        found = problems(model, tagged=False)  # tags were observed above
        if found:
            user_file = op.has(Trait.SOURCE)
            what = "its output" if out == ctx.out else f"its output {out.name}"
            raise ctx.fail(
                f"{'the ONNX file' if user_file else what} fails validation: {found[0]}"
                + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""),
                "fix or re-export the ONNX file" if user_file else BUG,
                where=params.get("path") if user_file else None)


InChild = Callable[[StepContext, StepMonitor], StepResult]


def execute_step(store: Store, step: dict[str, Any], key: str, inputs: dict[str, Path],
                 out_dir: Path | None, say: Callable[[str], None], in_child: InChild,
                 label: str = "", quiet: bool = False, debug: bool = False) -> StepOutcome:
    """Make one step's outputs exist (from the store, or by building them; a HEAVY op's
    `apply_step` through `in_child`) and describe them; a failure is an outcome too, with the
    wall time and peak memory it took (a failed verify on a large model can cost minutes)."""
    monitors: list[StepMonitor] = []
    try:
        return _execute(store, step, key, inputs, out_dir, say, in_child, label, quiet,
                        monitors)
    except Exception as exc:  # noqa: BLE001 - a bug or library error: still one clear line
        got = _failure(exc, store, step, inputs, out_dir, debug)
    for mon in monitors:
        got.wall_s, got.peak_rss_mb = round(mon.wall, 3), round(mon.peak, 1)
        got.started, got.worker = mon.started, mon.worker
    return got


def _failure(exc: Exception, store: Store, step: dict[str, Any], inputs: dict[str, Path],
             out_dir: Path | None, debug: bool) -> StepOutcome:
    if diskfull.is_disk_full(exc):
        cacheable = not OPS[step["op"]].has(Trait.NOT_CACHEABLE)
        where, what = (store.root, "the store") if cacheable or out_dir is None else \
            (out_dir, "the outputs directory")
        exc = diskfull.disk_full_error(where, what, step, inputs)
    if isinstance(exc, StepError):
        return failed(str(exc))
    if debug:
        traceback.print_exc()
    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    kind = getattr(exc, "type_name", type(exc).__name__)
    return failed(f"step {step['id']} ({step['op']}) failed: {kind}: "
                  f"{cause}; rerun with --debug for the traceback")


def _execute(store: Store, step: dict[str, Any], key: str, inputs: dict[str, Path],
             out_dir: Path | None, say: Callable[[str], None], in_child: InChild, label: str,
             quiet: bool, monitors: list[StepMonitor]) -> StepOutcome:
    cacheable = not OPS[step["op"]].has(Trait.NOT_CACHEABLE)
    entry, repair = store.lookup(key) if cacheable else (None, None)  # verified on use
    got = StepOutcome(status=OK, action="cached")
    if repair is not None:
        got.quarantined = repair.record()
        say(f"{label} {step['id']:<10} corrupt in the store ({'; '.join(repair.problems)}); "
            f"moved to {repair.moved_to}; rebuilding")
    if entry is not None:
        path = entry.path
        say(f"{label} {step['id']:<10} cached")
    else:
        say(f"{label} {step['id']:<10} running")
        with StepMonitor(step["id"], quiet) as mon:
            monitors.append(mon)  # read by execute_step if the build raises
            path, entry, built = _build(store, step, key, inputs, cacheable, out_dir, say,
                                        in_child, mon)
        if built:
            got.action, got.wall_s, got.peak_rss_mb = "run", round(mon.wall, 3), \
                round(mon.peak, 1)
            got.started, got.worker = mon.started, mon.worker
            say(f"      {step['id']} done in {mon.wall:.1f} s")
        else:
            say(f"      {step['id']} was built meanwhile by another run: cached")
    files = entry.files if entry is not None else None
    got.outputs, got.metrics = _describe(path, files)
    gate = OPS[step["op"]].gate
    if gate and got.metrics.get(gate):  # a verdict, cached with the result it judges
        got.status, got.error = FAILED, f"step {step['id']} ({step['op']}): {got.metrics[gate]}"
    got.digests = {k: v for k, v in (files or {}).items() if k != RESULT}
    got.path = str(path)
    return got


def _build(store: Store, step: dict[str, Any], key: str, inputs: dict[str, Path],
           cacheable: bool, out_dir: Path | None, say: Callable[[str], None],
           in_child: InChild, mon: StepMonitor) -> tuple[Path, Entry | None, bool]:
    """Build a step's outputs into the store, or (not cacheable) into the run's outputs.
    Returns where they are, their store entry (None if not cacheable) and whether this call
    built them (not if another process built the entry meanwhile)."""
    cache_dir = store.root / "session_cache"
    ctx = StepContext({**step, "key": key}, inputs, Path(), say, cache_dir, store.pool)
    if not cacheable:
        base = out_dir or store.root / "tmp" / f"uncached-{uuid.uuid4().hex[:8]}"
        ctx.out = base / step["id"]
        ctx.out.mkdir(parents=True, exist_ok=True)
        _apply(ctx, mon, in_child)
        return ctx.out, None, True
    with store.lock(key):
        entry = store.lookup_locked(key)[0]
        if entry is not None:  # another process built it meanwhile
            return entry.path, entry, False
        with store.building(key, {"step": step["id"], "op": step["op"]}) as tmp:
            ctx.out = tmp
            _apply(ctx, mon, in_child)
    return store.entry_dir(key), store.sealed.pop(key), True


def _apply(ctx: StepContext, mon: StepMonitor, in_child: InChild) -> StepResult:
    """apply_step, in another process for ops declared HEAVY (the runner says which)."""
    return in_child(ctx, mon) if ctx.op.has(Trait.HEAVY) else apply_step(ctx)


def _describe(path: Path, files: dict[str, str] | None) -> tuple[dict[str, str], dict]:
    names = files.keys() if files is not None else [p.name for p in path.iterdir() if p.is_file()]
    outputs = {n: str(path / n) for n in sorted(names)
               if n != RESULT and not weights.blob_digest(n)}  # blobs: in digests
    result = path / RESULT
    metrics = json.loads(result.read_text())["metrics"] if result.is_file() else {}
    return outputs, metrics
