"""perf.module: the steps that benchmark one module alone.

`extract` cuts the subgraph of every module the name or tag path matches out of the graph the
deliverable is (or, for an EPContext deliverable, the graph it is compiled from), a compile
step compiles the pieces the same way when the deliverable is compiled, and a second perf
step times each piece alone. How many modules a class name matches is known only once the
model is exported, so one extract step yields one piece per match and the perf step one row
per piece.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.core.ops import FactName, Trait
from planner.core.plan import Step
from planner.core.storelayout import entry_dir
from planner.errors import PlanError
from planner.support.suggest import did_you_mean

EXTRACT, COMPILE, PERF = "extract", "compile_module", "perf_module"


def steps(config: dict[str, Any], lowered: list[Step], deliverable: str,
          sid: Callable[[str], str] = lambda op: op) -> list[Step]:
    """The steps perf.module adds after one graph's lowered chain (none when it is null);
    `sid` names a step in that graph's chain."""
    module = config["perf"]["module"]
    if not module:
        return []
    if config["perf"]["iterations"] < 1:
        raise PlanError(f"perf.module={module}: benchmarking a module needs perf.iterations "
                        "of 1 or more; use perf=quick, or unset perf.module")
    hierarchy = next((s for s in lowered if any(e.fact == FactName.HIERARCHY_MAP
                                                 for e in s.decl.ensures)), None)
    if hierarchy is None:
        raise PlanError(f"perf.module={module}: modules are found by the hierarchy tags of a "
                        f"torch export, and model={config['model']['name']} is not exported "
                        "from torch; unset perf.module (the whole-model perf still runs)")
    by_id = {s.id: s for s in lowered}
    final = by_id[deliverable]
    sealed = final.decl.has(Trait.ENCAPSULATES)
    graph = final.chain_input if sealed else final.id
    out = [Step(sid(EXTRACT), "extract", {"module": module},
                {"model": graph, "hierarchy": hierarchy.id})]
    if sealed:  # the pieces are compiled the way the deliverable was
        out.append(Step(sid(COMPILE), final.op, dict(final.params), {"model": sid(EXTRACT)}))
    perf = next(s for s in lowered if s.op == "perf")
    out.append(Step(sid(PERF), "perf", dict(perf.params), {"model": out[-1].id}))
    return out


HIERARCHY_FILE = "model_htp_metadata.json"  # the export's sidecar (executors.onnx.artifacts)


def _named(steps: list[Any]) -> list[tuple[Any, str, str]]:
    """(the step, the config path, the name) of every module a step names by class or tag
    path: perf.module's extract, quant.overrides' `modules` selectors on quantize (its rules
    in the config's order)."""
    out = []
    for s in steps:
        op, params = (s["op"], s["params"]) if isinstance(s, dict) else (s.op, s.params)
        if op == EXTRACT:
            out.append((s, "perf.module", params["module"]))
        for i, rule in enumerate(params.get("overrides") or [] if op == "quantize" else []):
            out += [(s, f"quant.overrides.{i}.modules", m) for m in rule.get("modules", [])]
    return out


def check_known_modules(plan: Any, store: Path) -> None:
    """A module perf.module or quant.overrides names that no module of an export already in
    the store is, is refused at plan time, before anything is built (else the extract or
    quantize step reports it, after the build)."""
    for s, where, spec in _named(list(plan.live())):
        source = plan.step(s.inputs["hierarchy"])
        try:
            meta = json.loads((entry_dir(store, source.key) / HIERARCHY_FILE).read_text())
            set(meta["traced_modules"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not exported yet: checked on a trace before the build (module_error)
        problem = module_error(spec, meta, where)
        if problem:
            raise PlanError(problem)


def unchecked_modules(ir: dict[str, Any], store: Path) -> dict[str, list[tuple[str, str]]]:
    """{graph: [(config path, module name)]} for the modules a Plan IR names whose export is
    not in the store yet: they are checked on a trace of the model before anything is built."""
    steps = {s["id"]: s for s in ir["steps"] if s.get("action") != "elided"}
    out: dict[str, list[tuple[str, str]]] = {}
    for s, where, spec in _named(list(steps.values())):
        export = steps.get(s["inputs"].get("hierarchy", ""))
        if export is not None and \
                not (entry_dir(store, export["key"]) / HIERARCHY_FILE).is_file():
            out.setdefault(export["params"]["graph"] or "model", []).append((where, spec))
    return out


def module_error(spec: str, meta: dict[str, Any], where: str = "perf.module") -> str | None:
    """Why `where`=`spec` names no module of an export whose sidecar (or trace) is `meta`
    (traced_modules, inlined_classes, root); None if it names one."""
    traced = set(meta["traced_modules"])
    if _matches(spec, traced):
        return None
    if spec in (meta.get("inlined_classes") or []):
        return (f"{where}={spec}: {spec} is a torch.nn class the export inlines into the "
                f"modules that call it; export with export.torch_modules=[{spec}] to keep it "
                "as a module")
    classes = sorted({_class_of(p) for p in traced if p.count("/") > 1})
    known = sorted(traced) if spec.startswith("/") else classes
    return (f"{where}={spec} matches no module of "
            f"{str(meta.get('root', '')).strip('/') or 'the model'}"
            f"{did_you_mean(spec, known)}; name a module class "
            f"({', '.join(classes)}) or a tag path (`modelplan inspect --hierarchy` "
            "with the same overrides lists them)")


def _class_of(path: str) -> str:
    return path.rsplit("/", 1)[-1].partition(".")[0]


def _matches(spec: str, traced: set[str]) -> bool:
    return spec in traced if spec.startswith("/") else any(_class_of(p) == spec for p in traced)
