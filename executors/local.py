"""The local executor: run a Plan IR's steps in this process against the store (DESIGN §5)."""

from __future__ import annotations

import json
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executors import publish
from executors.artifacts import problems, read_facts
from executors.base import MODEL, SOURCE, StepContext, has_implementation, implementation
from executors.monitor import StepMonitor
from executors.store import Store
from planner import facts as F
from planner.errors import PlanError, StepError
from planner.keys import content_key
from planner.ops import OPS, Trait

RESULT = "result.json"


@dataclass
class RunState:
    """What the run has learned so far: where outputs are, effective keys, failures."""

    out_dirs: dict[str, Path] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)   # elided step -> step standing for it
    unelided: set[str] = field(default_factory=set)       # elided in the plan, ran anyway
    failed: set[str] = field(default_factory=set)


def check_implemented(ir: dict[str, Any]) -> None:
    missing = sorted({s["op"] for s in ir["steps"] if not has_implementation(s["op"])})
    if missing:
        raise PlanError(f"the plan needs op(s) {', '.join(missing)}, which the local executor "
                        "cannot run yet; nothing was run")


class LocalExecutor:
    def __init__(self, store: Store, debug: bool = False, quiet: bool = False) -> None:
        self.store = store
        self.debug = debug
        self.quiet = quiet

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def run(self, ir: dict[str, Any], run_name: str, outputs_root: Path | None,
            overrides: list[str] | None = None) -> dict[str, Any]:
        check_implemented(ir)
        started, t0 = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        out_dir = outputs_root / run_name if outputs_root else None
        state, records, error = RunState(), [], None
        for i, step in enumerate(ir["steps"], 1):
            rec = self._step(ir, step, state, f"[{i}/{len(ir['steps'])}]", out_dir)
            records.append(rec)
            if rec["status"] == "failed" and error is None:
                error = {"step": step["id"], "message": rec["error"]}
        record = {
            "format_version": 1, "run_id": run_id, "status": "failed" if error else "ok",
            "started": started, "wall_s": round(time.perf_counter() - t0, 3), "executor": "local",
            "store": str(self.store.root), "config_digest": ir["config_digest"],
            "overrides": list(overrides or []),
            "deliverable": state.alias.get(ir["deliverable"], ir["deliverable"]),
            "outputs_dir": str(out_dir) if out_dir else None, "steps": records, "error": error,
        }
        if out_dir is not None:
            publish.outputs(record, state.out_dirs, out_dir)
        self.store.save_run(record)
        return record

    # -- one step ------------------------------------------------------------------------
    def _step(self, ir: dict[str, Any], step: dict[str, Any], state: RunState, label: str,
              out_dir: Path | None) -> dict[str, Any]:
        inputs = self._effective_inputs(step, state)
        key = self._effective_key(ir, step, inputs, state)
        rec = {"id": step["id"], "op": step["op"], "key": key, "action": step["action"],
               "planned_action": step["action"], "status": "ok", "wall_s": 0.0,
               "peak_rss_mb": 0.0, "outputs": {}, "digests": {}, "metrics": {},
               "proof_check": None, "error": None}
        if any(src in state.failed for src in inputs.values()):
            state.failed.add(step["id"])
            rec.update(status="skipped", error="an input step failed")
            self.say(f"{label} {step['id']:<10} skipped (an input step failed)")
            return rec
        if step["action"] == "elided":
            src = inputs[OPS[step["op"]].chain_role]
            held, detail = premises_hold(step, state.out_dirs[src], src)
            rec["proof_check"] = {"held": held, "detail": detail}
            if held:
                state.alias[step["id"]] = inputs[OPS[step["op"]].chain_role]
                self.say(f"{label} {step['id']:<10} elided ({detail})")
                return rec
            state.unelided.add(step["id"])
            self.say(f"{label} {step['id']:<10} proof did not hold ({detail}); running it")
        ctx_inputs = {role: state.out_dirs[src] for role, src in inputs.items()}
        result = execute_step(self.store, step, key, ctx_inputs, out_dir, self.say, label,
                              self.quiet, self.debug)
        path = result.pop("path", None)
        rec.update(result)
        if rec["status"] == "failed":
            state.failed.add(step["id"])
            self.say(f"      {step['id']}: FAILED: {rec['error']}")
        else:
            state.out_dirs[step["id"]] = Path(path)
        return rec

    def _effective_inputs(self, step: dict[str, Any], state: RunState) -> dict[str, str]:
        out = {}
        for role, src in step["inputs"].items():
            via = step.get("via", {}).get(role)
            src = via if via in state.unelided else src
            out[role] = state.alias.get(src, src)
        return out

    def _effective_key(self, ir: dict[str, Any], step: dict[str, Any], inputs: dict[str, str],
                       state: RunState) -> str:
        planned = {r: next(s["key"] for s in ir["steps"] if s["id"] == src)
                   for r, src in step["inputs"].items()}
        actual = {r: state.keys.get(src, planned[r]) for r, src in inputs.items()}
        key = step["key"] if actual == planned else content_key(step["op"], step["params"],
                                                                actual, ir["tools"])
        state.keys[step["id"]] = key
        return key

def premises_hold(step: dict[str, Any], src_dir: Path, src: str) -> tuple[bool, str]:
    """Re-check an elision on the real input: the facts stamped into the artifact."""
    op = OPS[step["op"]]
    stamped = read_facts(src_dir / MODEL) if (src_dir / MODEL).is_file() else \
        json.loads((src_dir / SOURCE).read_text()).get("facts")
    if stamped is None:
        return False, f"{src}'s output carries no facts stamp"
    given = {k: F.Fact(v["value"], v["by"]) for k, v in stamped.items()}
    missing = [F.describe_ensure(e, step["params"]) for e in op.ensures
               if not F.ensured_holds(given, e, step["params"])]
    if missing:
        return False, f"not on the real input: {', '.join(missing)}"
    return True, "premises hold on the real input"


def execute_step(store: Store, step: dict[str, Any], key: str, inputs: dict[str, Path],
                 out_dir: Path | None, say: Callable[[str], None], label: str = "",
                 quiet: bool = False, debug: bool = False) -> dict[str, Any]:
    """Make one step's outputs exist (from the store, or by building them) and describe them:
    action, wall_s, peak_rss_mb, outputs, metrics, digests, path; or status=failed, error."""
    try:
        return _execute(store, step, key, inputs, out_dir, say, label, quiet)
    except StepError as exc:
        return {"status": "failed", "action": "run", "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a bug or library error: still one clear line
        if debug:
            traceback.print_exc()
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"status": "failed", "action": "run",
                "error": f"step {step['id']} ({step['op']}) failed: {type(exc).__name__}: "
                         f"{cause}; rerun with --debug for the traceback"}


def _execute(store: Store, step: dict[str, Any], key: str, inputs: dict[str, Path],
             out_dir: Path | None, say: Callable[[str], None], label: str,
             quiet: bool) -> dict[str, Any]:
    cacheable = not OPS[step["op"]].has(Trait.NOT_CACHEABLE)
    entry = store.get(key) if cacheable else None
    rec: dict[str, Any] = {"status": "ok"}
    if entry is not None:
        rec["action"], path = "cached", entry.path
        say(f"{label} {step['id']:<10} cached")
    else:
        say(f"{label} {step['id']:<10} running")
        with StepMonitor(step["id"], quiet) as mon:
            path, built = _build(store, step, key, inputs, cacheable, out_dir, say)
        if built:
            rec.update(action="run", wall_s=round(mon.wall, 3), peak_rss_mb=round(mon.peak, 1))
            say(f"      {step['id']} done in {mon.wall:.1f} s")
        else:
            rec["action"] = "cached"
            say(f"      {step['id']} was built meanwhile by another run: cached")
    entry = store.get(key) if cacheable else None
    files = entry.files if entry is not None else None
    rec["outputs"], rec["metrics"] = _describe(path, files)
    rec["digests"] = {k: v for k, v in (files or {}).items() if k != RESULT}
    rec["path"] = str(path)
    return rec


def _build(store: Store, step: dict[str, Any], key: str, inputs: dict[str, Path],
           cacheable: bool, out_dir: Path | None,
           say: Callable[[str], None]) -> tuple[Path, bool]:
    """Build a step's outputs into the store, or (not cacheable) into the run's outputs.
    Returns where they are and whether this call built them."""
    facts = dict(step["facts"])
    run_step = implementation(step["op"])
    cache_dir = store.root / "session_cache"
    if not cacheable:
        base = out_dir or store.root / "tmp" / f"uncached-{uuid.uuid4().hex[:8]}"
        target = base / step["id"]
        target.mkdir(parents=True, exist_ok=True)
        result = run_step(StepContext({**step, "key": key}, inputs, target, facts, say,
                                      cache_dir))
        (target / RESULT).write_text(json.dumps({"metrics": result.metrics}, indent=2))
        return target, True
    with store.lock(key):
        if store.get(key) is not None:  # another process built it while we waited
            return store.entry_dir(key), False
        with store.building(key, {"step": step["id"], "op": step["op"]}) as tmp:
            ctx = StepContext({**step, "key": key}, inputs, tmp, facts, say, cache_dir)
            result = run_step(ctx)
            _validate(ctx, tagged="tagged" in facts)
            (tmp / RESULT).write_text(json.dumps({"metrics": result.metrics}, indent=2,
                                                 sort_keys=True))
    return store.entry_dir(key), True


def _validate(ctx: StepContext, tagged: bool) -> None:
    path = ctx.out / MODEL
    if not path.is_file():
        return
    found = problems(path, tagged)
    if found:
        user_file = ctx.step["op"] == "resolve"
        raise ctx.fail(f"{'the ONNX file' if user_file else 'its output'} fails validation: "
                       f"{found[0]}" + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""),
                       "fix or re-export the ONNX file" if user_file else
                       "this is a modelplan bug for this model; rerun with --debug and report it",
                       where=ctx.params.get("path") if user_file else
                       str(ctx.inputs.get("model", "")))


def _describe(path: Path, files: dict[str, str] | None) -> tuple[dict[str, str], dict]:
    names = files.keys() if files is not None else [p.name for p in path.iterdir() if p.is_file()]
    outputs = {n: str(path / n) for n in sorted(names) if n != RESULT}
    result = path / RESULT
    metrics = json.loads(result.read_text())["metrics"] if result.is_file() else {}
    return outputs, metrics
