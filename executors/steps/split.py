"""split: a tagged graph cut into `parts` consecutive parts by its repeated block (a language
model's decoder layers), so that no part's weights pass what one model may hold (2 GB: one
protobuf, one embedded context binary). Part 0 also holds what precedes the first block (the
embeddings, the mask and position tables), the last part what follows the last (the final norm,
the head). A tensor one part makes and a later part reads is the first's output and the
second's input; run in order, the parts compute the whole graph (checked on a sample here).

The output is a piece set (executors/onnx/pieces.py) with `"parts": true`; compile compiles
each part, and sessions chain them (executors/runtime/parts.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from executors.onnx import pieces, subgraph
from executors.onnx.artifacts import MODEL, load, save
from executors.onnx.iospecs import io_specs
from executors.onnx.subgraph import assign, blocks
from executors.run.step_api import StepContext, StepResult
from executors.samples import batches


def run(ctx: StepContext) -> StepResult:
    parts = ctx.params["parts"]
    src = ctx.input_model()
    model = load(src, external=False)
    prefix, index = blocks(subgraph.node_tags(model.graph))
    if not prefix:
        raise ctx.fail("the graph has no repeated block to split at (no numbered module in "
                       "its hierarchy tags)", "set export.parts=1")
    try:
        where = assign(model.graph, index, parts)
    except ValueError as exc:
        raise ctx.fail(str(exc), "set export.parts to at most the block count") from exc
    cuts = [subgraph.cut(model.graph, f"{prefix} part {k}",
                         [n for n, p in enumerate(where) if p == k]) for k in range(parts)]
    _hand_over(model.graph, cuts)
    infos = subgraph.value_infos(model)
    # the boundary's values on a sample: types where shape inference cannot tell, and each
    # part's inputs recorded so that it can be checked alone (compile runs it on them)
    values = _values(ctx, src, model, {x for c in cuts for x in c.inputs + c.outputs})
    infos = _typed(infos, {x: v for x, v in values.items()
                           if not subgraph.known(infos.get(x))})
    rows = []
    for k, c in enumerate(cuts):
        out = ctx.out / f"part.{k}"
        out.mkdir()
        save(subgraph.build(model, c, infos), out / MODEL, base=src.parent)
        pieces.save_feeds(out, {x: values[x] for x in c.inputs})
        rows.append({"dir": out.name, "tag": c.tag, "nodes": len(c.keep),
                     "module_nodes": c.module_nodes, "inputs": c.inputs, "outputs": c.outputs,
                     "weight_bytes": _weight_bytes(out / MODEL)})
    specs, outs = io_specs(src)
    pieces.write_index(ctx.out, {"format_version": 1, "parts": True, "block": prefix,
                                 "pieces": rows, "io": {"inputs": specs, "outputs": outs}})
    return StepResult(metrics={"parts": parts, "block": prefix,
                               "part_weight_bytes": [r["weight_bytes"] for r in rows],
                               "nodes": [r["nodes"] for r in rows]})


def _hand_over(graph: onnx.GraphProto, cuts: list[subgraph.Cut]) -> None:
    """Every tensor a part reads that an earlier part makes is that part's output (a part pulls
    the Q/DQ chain in front of an input in with it, so it may read a tensor the part that made
    it only used inside itself)."""
    nodes = list(graph.node)
    made_by: dict[str, int] = {}
    for k, c in enumerate(cuts):
        for i in c.keep:
            for out in nodes[i].output:
                made_by.setdefault(out, k)
    for k, c in enumerate(cuts):
        for x in c.inputs:
            j = made_by.get(x)
            if j is not None and j >= k:
                raise ValueError(f"part {k} reads {x!r}, which part {j} makes")
            if j is not None and x not in cuts[j].outputs:
                cuts[j].outputs.append(x)


def _weight_bytes(path: Path) -> int:
    from executors.runtime.session_cache import weight_bytes

    return weight_bytes(path)


def _values(ctx: StepContext, src: Path, model: onnx.ModelProto,
            names: set[str]) -> dict[str, np.ndarray]:
    """The values `names` take on a sample input (a probe copy of the graph, its weights
    linked, exposes them as outputs)."""
    import onnxruntime as ort

    from executors.runtime.adapters import host_providers

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    for name in sorted(names - have):
        probe.graph.output.add(name=name)
    where = ctx.out / ".probe"
    where.mkdir()
    save(probe, where / MODEL, base=src.parent)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(where / MODEL), so, providers=host_providers())
    feed = batches(io_specs(src)[0], 1, "perf")[0]
    wanted = sorted(names - set(feed))
    got = dict(zip(wanted, session.run(wanted, feed), strict=True))
    del session
    shutil.rmtree(where)
    return {**{n: v for n, v in feed.items() if n in names}, **got}


def _typed(infos: dict[str, Any], values: dict[str, np.ndarray]) -> dict[str, Any]:
    out = dict(infos)
    for name, value in values.items():
        out[name] = onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))
    return out
