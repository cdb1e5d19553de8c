"""The local executor: run a Plan IR's steps in this process against the store (DESIGN §5)."""

from __future__ import annotations

import json
import sys
import time
import traceback
import uuid
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
            held, detail = self._premises_hold(step, inputs, state)
            rec["proof_check"] = {"held": held, "detail": detail}
            if held:
                state.alias[step["id"]] = inputs[OPS[step["op"]].chain_role]
                self.say(f"{label} {step['id']:<10} elided ({detail})")
                return rec
            state.unelided.add(step["id"])
            self.say(f"{label} {step['id']:<10} proof did not hold ({detail}); running it")
        try:
            self._execute(ir, step, key, inputs, state, rec, label, out_dir)
        except StepError as exc:
            self._fail(step, rec, state, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug or library error: still one clear line
            if self.debug:
                traceback.print_exc()
            cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self._fail(step, rec, state, f"step {step['id']} ({step['op']}) failed: "
                       f"{type(exc).__name__}: {cause}; rerun with --debug for the traceback")
        return rec

    def _fail(self, step: dict[str, Any], rec: dict[str, Any], state: RunState, msg: str) -> None:
        state.failed.add(step["id"])
        rec.update(status="failed", action="run", error=msg)
        self.say(f"      {step['id']}: FAILED: {msg}")

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

    def _premises_hold(self, step: dict[str, Any], inputs: dict[str, str],
                       state: RunState) -> tuple[bool, str]:
        """Re-check an elision on the real input: the facts stamped into the artifact."""
        op = OPS[step["op"]]
        src_dir = state.out_dirs[inputs[op.chain_role]]
        stamped = read_facts(src_dir / MODEL) if (src_dir / MODEL).is_file() else \
            json.loads((src_dir / SOURCE).read_text()).get("facts")
        if stamped is None:
            return False, f"{inputs[op.chain_role]}'s output carries no facts stamp"
        given = {k: F.Fact(v["value"], v["by"]) for k, v in stamped.items()}
        missing = [F.describe_ensure(e, step["params"]) for e in op.ensures
                   if not F.ensured_holds(given, e, step["params"])]
        if missing:
            return False, f"not on the real input: {', '.join(missing)}"
        return True, "premises hold on the real input"

    def _execute(self, ir: dict[str, Any], step: dict[str, Any], key: str,
                 inputs: dict[str, str], state: RunState, rec: dict[str, Any], label: str,
                 out_dir: Path | None) -> None:
        op = OPS[step["op"]]
        ctx_inputs = {role: state.out_dirs[src] for role, src in inputs.items()}
        cacheable = not op.has(Trait.NOT_CACHEABLE)
        entry = self.store.get(key) if cacheable else None
        if entry is not None:
            rec["action"], path = "cached", entry.path
            self.say(f"{label} {step['id']:<10} cached")
        else:
            self.say(f"{label} {step['id']:<10} running")
            with StepMonitor(step["id"], self.quiet) as mon:
                path, built = self._build(step, key, ctx_inputs, cacheable, out_dir)
            if built:
                rec.update(action="run", wall_s=round(mon.wall, 3),
                           peak_rss_mb=round(mon.peak, 1))
                self.say(f"      {step['id']} done in {mon.wall:.1f} s")
            else:
                rec["action"] = "cached"
                self.say(f"      {step['id']} was built meanwhile by another run: cached")
        state.out_dirs[step["id"]] = path
        entry = self.store.get(key) if cacheable else None
        files = entry.files if entry is not None else None
        rec["outputs"], rec["metrics"] = _describe(path, files)
        rec["digests"] = {k: v for k, v in (files or {}).items() if k != RESULT}

    def _build(self, step: dict[str, Any], key: str, inputs: dict[str, Path], cacheable: bool,
               out_dir: Path | None) -> tuple[Path, bool]:
        """Build a step's outputs into the store, or (not cacheable) into the run's outputs.
        Returns where they are and whether this run built them."""
        facts = dict(step["facts"])
        run_step = implementation(step["op"])
        if not cacheable:
            base = out_dir or self.store.root / "tmp" / f"uncached-{uuid.uuid4().hex[:8]}"
            target = base / step["id"]
            target.mkdir(parents=True, exist_ok=True)
            result = run_step(StepContext({**step, "key": key}, inputs, target, facts, self.say,
                                         self.store.root / "session_cache"))
            (target / RESULT).write_text(json.dumps({"metrics": result.metrics}, indent=2))
            return target, True
        with self.store.lock(key):
            if self.store.get(key) is not None:  # another process built it while we waited
                return self.store.entry_dir(key), False
            with self.store.building(key, {"step": step["id"], "op": step["op"]}) as tmp:
                ctx = StepContext({**step, "key": key}, inputs, tmp, facts, self.say,
                                  self.store.root / "session_cache")
                result = run_step(ctx)
                _validate(ctx, tagged="tagged" in facts)
                (tmp / RESULT).write_text(json.dumps({"metrics": result.metrics},
                                                     indent=2, sort_keys=True))
        return self.store.entry_dir(key), True


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
