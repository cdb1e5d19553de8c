"""tag: write `winml.hierarchy.tag` and `winml.hierarchy.depth` into every node's metadata from
the export sidecar, after every rewrite (nodes fusion or quantization created included)."""

from __future__ import annotations

import json
from collections import Counter

from executors.onnx import hierarchy
from executors.onnx.artifacts import DEPTH_KEY, MODEL, SIDECAR, TAG_KEY, load, save, set_meta
from executors.run.step_api import StepContext, StepResult


def run(ctx: StepContext) -> StepResult:
    meta = json.loads((ctx.inputs["hierarchy"] / SIDECAR).read_text())
    model = load(ctx.input_model(), external=False)  # tags change no weight: blobs are linked
    assigned = hierarchy.assign(model.graph, meta)
    for node, (tag, _how) in zip(model.graph.node, assigned, strict=True):
        set_meta(node, TAG_KEY, tag)
        set_meta(node, DEPTH_KEY, str(hierarchy.depth(tag)))
    save(model, ctx.out / MODEL, base=ctx.inputs["model"])
    how = Counter(h for _t, h in assigned)
    total = len(assigned)
    return StepResult(metrics={"nodes": total, "matched": dict(sorted(how.items())),
                               "coverage_percent": 100.0 if total else 0.0})
