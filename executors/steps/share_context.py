"""share_context: a causal LM's two quantized graphs compiled into EPContext models that share
one context binary, so the device holds the weights once (the QNN EP's `ep.share_ep_contexts`;
executors/runtime/shared_context.py says how, and why it runs each attempt in a child process).
The set is then opened here in a child process: where this host cannot load it (the x86 HTP
simulator crashes on any shared binary, measured), the step says so and the deliverable's
graphs stay the separately compiled ones, with the shared set beside them for the device."""

from __future__ import annotations

import shutil

from executors.onnx.artifacts import MODEL
from executors.run.step_api import StepContext, StepResult
from executors.runtime import shared_context
from executors.store.weights import link_blobs, link_or_copy
from planner.core.targets import of_params
from planner.models.roles import Kind, graphs_of


def run(ctx: StepContext) -> StepResult:
    p = ctx.params
    graphs = [g for g in graphs_of(Kind.DECODER_ONLY) if g in ctx.inputs]  # prompt's first
    target = of_params(p)
    staged = ctx.out / ".sources"  # each graph under its own name, the weights beside them
    staged.mkdir()
    for graph in graphs:
        src = ctx.input_model(graph).parent
        link_or_copy(src / MODEL, staged / f"{graph}.onnx")
        link_blobs(src, staged)
    ctx.progress("  compiling both graphs into one shared context (child process)")
    models = shared_context.compile_group(target, [staged / f"{g}.onnx" for g in graphs],
                                          ctx.out, p["provider_options"], share=True)
    shutil.rmtree(staged)
    binaries = shared_context.binaries_of(models)
    ctx.progress("  loading the shared set (child process)")
    problem = shared_context.load_problem(target, models, p["provider_options"], shared=True)
    return StepResult(metrics={
        "models": [m.name for m in models], "binaries": [b.name for b in binaries],
        "binary_bytes": sum(b.stat().st_size for b in binaries),
        "loads_here": not problem, "why_not": problem})
