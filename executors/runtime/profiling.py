"""Profiled runs for perf: which EP ran each node, and where the time goes per module.

On the CPU EP, ONNX Runtime's profiler times every node of the graph the session actually runs
(its optimized graph, saved beside the profile so fused nodes can be traced back to the tagged
nodes they came from). On the QNN EP, ONNX Runtime sees one node per compiled graph; the EP's
own profiling (`profiling_level=detailed`) lists every HTP op with its cycle count, named after
the ONNX node it was built from. Warm-up runs are profiled too (the profiler is on from session
creation) and left out of the figures.
"""

from __future__ import annotations

import csv
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import load
from executors.runtime import breakdown as B
from executors.runtime.adapters import adapter
from executors.runtime.nativelog import native_log
from planner.core.targets import Target

QNN_CSV = "qnn_profile.csv"
CPU_NOTE = ("ONNX Runtime profiler, CPU EP: kernel time per node of the optimized graph the "
            "session runs, mean over the profiled runs")
QNN_NOTE = ("QNN EP profiling (detailed): HTP cycles per op, mean over the profiled runs; ms is "
            "each op's share of the cycles times the accelerator's execute time")
NO_OPS = ("QNN EP profiling gave whole-graph times only (no per-op events), so there is no "
          "per-module breakdown on this backend")
NO_TAGS = "the model carries no hierarchy tags (winml.hierarchy.tag), so time is not per module"


def profile(target: Target, provider_options: dict[str, Any], model: Path,
            feed: dict[str, Any], warmup: int, runs: int, work: Path) -> dict[str, Any]:
    """Metrics of `warmup + max(runs, 1)` profiled runs: nodes per EP always, and with
    runs > 0 `profile` (what was measured, the total, coverage) and `modules` (one row per
    module)."""
    spec, runtime = target.session, adapter(target)
    own = bool(spec.profiling)  # the EP profiles its own ops; else ORT's profiler sees each node
    work.mkdir(parents=True, exist_ok=True)
    (work.parent / QNN_CSV).unlink(missing_ok=True)  # never leave an older run's figures
    options = {**provider_options, **spec.profiling,
               str(spec.profiling_file): str(work / QNN_CSV)} if own and runs \
        else provider_options
    so = runtime.session_options(target, options, cpu_fallback=False)
    so.enable_profiling = True
    so.profile_file_prefix = str(work / "ort")
    if not own:
        so.optimized_model_filepath = str(work / "optimized.onnx")
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    "optimized.onnx.data")
    with native_log():
        session = runtime.session(model, target, so=so)
        for _ in range(warmup + max(runs, 1)):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
        del session
    out: dict[str, Any] = nodes_by_ep(events, target.provider)
    if runs:
        out.update(_qnn(work / QNN_CSV, model, warmup) if own else
                   _cpu(events, work / "optimized.onnx", model, warmup))
        elsewhere = out["nodes_total"] - out["nodes_on_ep"]
        if own and elsewhere:  # CPU fallback nodes are not in the EP's own profile
            out["profile"]["note"] += (f"; {elsewhere} node(s) ran on other EPs and are not "
                                       "in it")
    if (work / QNN_CSV).is_file():  # the EP's own figures, kept beside the metrics
        (work / QNN_CSV).replace(work.parent / QNN_CSV)
    shutil.rmtree(work, ignore_errors=True)
    return out


def nodes_by_ep(events: list[dict[str, Any]], provider: str) -> dict[str, Any]:
    """Which EP ran each node, from the profiler's node events; `provider` is the target's."""
    per_ep: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e.get("cat") == "Node" and e.get("args", {}).get("provider"):
            per_ep[e["args"]["provider"]].add(_node_name(e["name"]))
    total = len(set().union(*per_ep.values())) if per_ep else 0
    return {"nodes_total": total, "nodes_on_ep": len(per_ep.get(provider, ())),
            "nodes_by_ep": {name: len(names) for name, names in sorted(per_ep.items())}}


def _node_name(event: str) -> str:
    for suffix in ("_kernel_time", "_fence_before", "_fence_after"):
        event = event.removesuffix(suffix)
    return event


def kernel_ms(events: list[dict[str, Any]], skip: int) -> tuple[dict[str, float], float, int]:
    """(mean ms per node, mean ms per run, runs) over the model runs after the first `skip`."""
    runs = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"][skip:]
    per_node: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and any(
                r["ts"] <= e["ts"] <= r["ts"] + r["dur"] for r in runs):
            per_node[_node_name(e["name"])] += e["dur"] / 1000.0
    n = max(len(runs), 1)
    return ({k: v / n for k, v in per_node.items()},
            sum(r["dur"] for r in runs) / 1000.0 / n, len(runs))


def _cpu(events: list[dict[str, Any]], optimized: Path, model: Path,
         warmup: int) -> dict[str, Any]:
    per_node, total, runs = kernel_ms(events, warmup)
    source = load(model, external=False)
    tags = B.model_tags(model.parent, source.graph)
    summary: dict[str, Any] = {"source": "onnxruntime-cpu", "note": CPU_NOTE, "runs": runs,
                               "total_ms": round(total, 6)}
    if not tags:
        return {"profile": {**summary, "note": NO_TAGS}, "modules": []}
    mapped = B.map_graph(load(optimized, external=False).graph, source.graph, tags)
    return {"profile": {**summary, **B.coverage(per_node, mapped, total)},
            "modules": B.module_rows(per_node, mapped, tags, total)}


def qnn_runs(path: Path) -> list[dict[str, Any]]:
    """One entry per execution in a QNN profiling CSV: accelerator cycles and microseconds,
    and the ops (their event names and cycles) in execution order."""
    runs: list[dict[str, Any]] = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            what, level = row["Event Identifier"], row["Event Level"]
            if level == "ROOT" and what == "Accelerator (execute) time (cycles)":
                runs.append({"cycles": float(row["Time"]), "us": None, "ops": []})
            elif level == "ROOT" and what == "Accelerator (execute) time" and runs:
                runs[-1]["us"] = float(row["Time"])
            elif level == "SUB-EVENT" and runs and row["Unit of Measurement"] == "CYCLES":
                runs[-1]["ops"].append((what.removesuffix(" (cycles)"), float(row["Time"])))
    return runs


def op_name(event: str) -> str:
    """The ONNX-side name in an HTP op event ("/model/x/MatMul:OpId_40" -> "/model/x/MatMul")."""
    return event.rsplit(":OpId_", 1)[0] if ":OpId_" in event else event


def _qnn(path: Path, model: Path, warmup: int) -> dict[str, Any]:
    runs = qnn_runs(path)[warmup:] if path.is_file() else []
    summary: dict[str, Any] = {"source": "qnn-htp", "note": QNN_NOTE, "runs": len(runs)}
    if not runs or not runs[0]["ops"]:
        return {"profile": {**summary, "note": NO_OPS, "per_op": False}, "modules": []}
    cycles: dict[str, float] = defaultdict(float)
    for run in runs:
        for event, value in run["ops"]:
            cycles[event] += value / len(runs)
    total_cycles = sum(r["cycles"] for r in runs) / len(runs)
    total_ms = sum(r["us"] or 0.0 for r in runs) / len(runs) / 1000.0
    graph = load(model, external=False).graph
    tags = B.model_tags(model.parent, graph)
    summary.update(per_op=True, total_cycles=round(total_cycles), total_ms=round(total_ms, 6),
                   ops=len(cycles))
    if not tags:
        return {"profile": {**summary, "note": NO_TAGS}, "modules": []}
    mapped = _map_ops(list(cycles), tags, B.model_inputs(model.parent, graph, tags))
    rows = B.module_rows(cycles, mapped, tags, total_cycles, unit="cycles")
    scale = total_ms / total_cycles if total_cycles else 0.0
    for row in rows:
        row["ms"], row["self_ms"] = (round(row["cycles"] * scale, 6),
                                     round(row["self_cycles"] * scale, 6))
    cover = B.coverage(cycles, mapped, total_cycles, unit="cycles")
    return {"profile": {**summary, **cover}, "modules": rows}


def _map_ops(events: list[str], tags: dict[str, str],
             inputs: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Map HTP op events to tags; the graph's input and output ops go to the root module."""
    names = [op_name(e) for e in events]
    by_name = B.map_sequence(names, tags, inputs)
    root = B.common_tag(list(tags.values()))
    out = {}
    for event, name in zip(events, names, strict=True):
        if name.split(" ")[0] in ("Input", "Output") and root is not None:
            out[event] = (root, "graph-io")
        elif name in by_name:
            out[event] = by_name[name]
    return out
