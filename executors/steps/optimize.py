"""optimize{flags}: the named ONNX Runtime transformer fusions, then the normalize fixed point.

matmul_add is ORT's MatMulAddFusion, part of the basic level, so normalize already applies it."""

from __future__ import annotations

from collections import Counter

from executors.artifacts import load, save, stamp_facts
from executors.base import MODEL, StepContext, StepResult
from executors.ortopt import basic_fixed_point

FUSION_OPTION = {  # flag -> onnxruntime.transformers FusionOptions attribute
    "gelu": "enable_gelu", "layer_norm": "enable_layer_norm",
    "skip_layer_norm": "enable_skip_layer_norm", "bias_gelu": "enable_bias_gelu",
    "attention": "enable_attention", "matmul_add": None,
}
FUSED_OPS = ("Gelu", "FastGelu", "BiasGelu", "LayerNormalization", "SkipLayerNormalization",
             "Attention", "MultiHeadAttention", "Gemm")


def run(ctx: StepContext) -> StepResult:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    flags = ctx.params["flags"]
    unknown = [f for f in flags if f not in FUSION_OPTION]
    if unknown:
        raise ctx.fail(f"unsupported fusion flag(s) {unknown}",
                       f"use optim.flags from {sorted(FUSION_OPTION)}")
    model = load(ctx.input_model())
    before = Counter(n.op_type for n in model.graph.node)
    fused = model
    if any(FUSION_OPTION[f] for f in flags):  # else optimize{flags} is exactly normalize
        options = FusionOptions("bert")
        for attr in vars(options):
            if attr.startswith("enable_") and attr != "enable_shape_inference":
                setattr(options, attr, False)
        for flag in flags:
            if FUSION_OPTION[flag]:
                setattr(options, FUSION_OPTION[flag], True)
        fused = optimize_model(model, model_type="bert", opt_level=0,
                               optimization_options=options).model
    work = ctx.out / ".work"
    work.mkdir()
    result, passes = basic_fixed_point(fused, work)
    work.rmdir()
    after = Counter(n.op_type for n in result.graph.node)
    stamp_facts(result, ctx.facts, ctx.id, ctx.step["key"])
    save(result, ctx.out / MODEL)
    return StepResult(metrics={
        "fused_ops": {op: after[op] - before[op] for op in FUSED_OPS if after[op] != before[op]},
        "nodes_before": sum(before.values()), "nodes_after": sum(after.values()),
        "ort_passes_to_fixed_point": passes})
