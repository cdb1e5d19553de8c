"""extract: cut the subgraph of every module `module` names (a class name, or a tag path) out of
a tagged graph: one piece per module, a model of its own whose boundary tensors are its inputs
and outputs, with the values its inputs had when the whole model ran on a sample input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from executors.onnx import pieces, subgraph
from executors.onnx.artifacts import MODEL, SIDECAR, load, save
from executors.onnx.hierarchy import prefixes
from executors.onnx.iospecs import io_specs
from executors.run.step_api import StepContext, StepResult
from executors.runtime.adapters import host_providers
from executors.samples import batches
from planner.support.suggest import did_you_mean


def run(ctx: StepContext) -> StepResult:
    spec = ctx.params["module"]
    meta = json.loads((ctx.inputs["hierarchy"] / SIDECAR).read_text())
    src = ctx.input_model()
    model = load(src)
    tags = subgraph.node_tags(model.graph)
    with_nodes = {p for t in tags if t for p in prefixes(t)}
    paths = subgraph.matches(spec, with_nodes | set(meta["traced_modules"]))
    if not paths:
        raise ctx.fail(*_no_match(spec, with_nodes, meta))
    empty = [p for p in paths if p not in with_nodes]
    if len(empty) == len(paths):
        raise ctx.fail(f"perf.module={spec}: {', '.join(empty)} ran during export but "
                       "has no ONNX nodes (its ops were folded away, or reach no output)",
                       "choose a module with nodes: " + _classes(with_nodes))
    cuts = [subgraph.cut(model.graph, p, subgraph.members(tags, p))
            for p in paths if p in with_nodes]
    ctx.progress(f"  {len(cuts)} module(s) match {spec}: cutting them out")
    values = _boundary_values(src, model, {x for c in cuts for x in c.inputs + c.outputs})
    infos = _typed(subgraph.value_infos(model), values)
    rows = []
    for i, c in enumerate(cuts):
        where = ctx.out / f"piece.{i}"
        where.mkdir()
        save(subgraph.build(model, c, infos), where / MODEL)
        pieces.save_feeds(where, {x: values[x] for x in c.inputs})
        rows.append({"dir": where.name, "tag": c.tag, "nodes": len(c.keep),
                     "module_nodes": c.module_nodes, "inputs": _specs(c.inputs, values),
                     "outputs": _specs(c.outputs, values)})
    pieces.write_index(ctx.out, {"format_version": 1, "module": spec, "pieces": rows,
                                 "empty": empty})
    return StepResult(metrics={"module": spec, "pieces": len(rows), "empty": empty,
                               "nodes": [r["nodes"] for r in rows]})


def _no_match(spec: str, with_nodes: set[str], meta: dict[str, Any]) -> tuple[str, str]:
    """The cause and fix when `spec` names no module."""
    if spec in meta.get("inlined_classes", []):
        cause = (f"perf.module={spec}: {spec} is a torch.nn class the export inlines into the "
                 "modules that call it")
        return cause, f"export with export.torch_modules=[{spec}] to keep it as a module"
    known = sorted(with_nodes) if spec.startswith("/") else \
        sorted({subgraph.class_of(p) for p in with_nodes})
    example = min(with_nodes, key=lambda p: (p.count("/") != 2, p), default=meta["root"])
    cause = (f"perf.module={spec} matches no module of {meta['root'].strip('/')}"
             f"{did_you_mean(spec, known)}")
    return cause, f"name a module class ({_classes(with_nodes)}) or a tag path such as {example}"


def _classes(paths: set[str]) -> str:
    return ", ".join(sorted({subgraph.class_of(p) for p in paths}))


def _boundary_values(src: Path, model: onnx.ModelProto,
                     names: set[str]) -> dict[str, np.ndarray]:
    """The values `names` take when the whole model runs on a sample input (ONNX Runtime, CPU,
    no graph optimizations, so every tensor is the graph's own)."""
    import onnxruntime as ort

    specs, _ = io_specs(src)
    feed = batches(specs, 1, "perf")[0]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    wanted = sorted(n for n in names if n not in feed)
    for name in wanted:
        if name not in have:
            probe.graph.output.add(name=name)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), so, providers=host_providers())
    got = dict(zip(wanted, session.run(wanted, feed), strict=True))
    return {**{n: v for n, v in feed.items() if n in names}, **got}


def _typed(infos: dict[str, onnx.ValueInfoProto],
           values: dict[str, np.ndarray]) -> dict[str, onnx.ValueInfoProto]:
    """Shape inference's types, completed from the recorded values where it cannot tell."""
    out = dict(infos)
    for name, value in values.items():
        if not subgraph.known(out.get(name)):
            out[name] = onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))
    return out


def _specs(names: list[str], values: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    return [{"name": n, "dtype": str(values[n].dtype), "shape": list(values[n].shape)}
            for n in names]
