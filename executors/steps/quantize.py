"""quantize: QDQ static quantization with ONNX Runtime (executors/onnx/quantizer.py), calibrated
on real sentences through the model's tokenizer, or on seeded random values inside each input's
range, with `quant.overrides` applied per module; a large graph layer by layer
(executors/onnx/layerwise.py, `quant.layerwise`); with `quant.search=auto` the repair search
(executors/steps/quant_search.py); kind=fp16 converts to float16 instead."""

from __future__ import annotations

from typing import Any

from executors.onnx import mixed_precision as mp
from executors.onnx import quantizer as Q
from executors.onnx.artifacts import MODEL, load, save
from executors.run.step_api import StepContext, StepResult
from executors.steps import quant_search
from executors.steps.quant_search import quantize_or_fail, staged


def run(ctx: StepContext) -> StepResult:
    if ctx.params["kind"] == "fp16":
        return _float16(ctx)
    if ctx.params.get("search"):
        return quant_search.run(ctx)
    return _qdq(ctx)


def _float16(ctx: StepContext) -> StepResult:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = load(ctx.input_model())
    rules = ctx.params.get("overrides", [])
    blocked = _fp16_blocked(ctx, model, rules) if rules else []
    with Q.quiet_logging():
        model = convert_float_to_float16(model, keep_io_types=True,
                                         node_block_list=blocked or None)
        if not _sorted(model):  # it appends the Casts of float32 graph inputs at the end
            OnnxModel(model).topological_sort()
    save(model, ctx.out / MODEL)
    metrics: dict[str, Any] = {"precision": "fp16"}
    if rules:
        metrics["overridden"] = {"float32 nodes": len(blocked)}
    return StepResult(metrics=metrics)


def _fp16_blocked(ctx: StepContext, model: Any, rules: list[dict[str, Any]]) -> list[str]:
    """The nodes quant.overrides keeps in float32 under quant=fp16."""
    import json

    from executors.onnx import hierarchy as H
    from executors.onnx.artifacts import SIDECAR

    tags = [""] * len(model.graph.node)
    if "hierarchy" in ctx.inputs:
        meta = json.loads((ctx.inputs["hierarchy"] / SIDECAR).read_text())
        tags = [t for t, _how in H.assign(model.graph, meta)]
    try:
        return mp.decide(rules, model.graph, tags).float_nodes()
    except mp.SelectionError as exc:
        raise ctx.fail(str(exc), "fix the rule's selector (modelplan diagnose lists the "
                       "modules)", where="quant.overrides") from None


def _sorted(model: Any) -> bool:
    """Every node's inputs are graph inputs, initializers or outputs of earlier nodes."""
    known = {v.name for v in model.graph.input} | {i.name for i in model.graph.initializer} | {""}
    for node in model.graph.node:
        if any(name not in known for name in node.input):
            return False
        known.update(node.output)
    return True


def _qdq(ctx: StepContext) -> StepResult:
    found, calibration = staged(ctx)
    try:
        metrics = quantize_or_fail(ctx, found, ctx.params.get("overrides", []), ctx.out / MODEL)
    finally:
        Q.unstage(found)
    pieces = metrics.get("layerwise", {})
    if "whole" in pieces:
        ctx.progress(f"  layer by layer: {pieces['whole']}; quantized the whole graph")
    elif pieces:
        ctx.progress(f"  calibrated and quantized layer by layer: {pieces['pieces']} pieces "
                     f"of {pieces['block']}")
    return StepResult(metrics={**calibration, **metrics})
