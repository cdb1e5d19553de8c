"""genai_stages: a causal LM's two quantized graphs as onnxruntime-genai's decoder-pipeline
stages over fixed key/value buffers (executors/generation/stages.py), each compiled into an
EPContext model of its own (a context binary shared by both does not load on this host's HTP
simulator: executors/runtime/shared_context.py), then opened and run once here in a child
process. The bundle delivers them beside its graphs and names them in genai_config.json. Graphs
genai's pipeline does not feed (a layer's recurrent state, which only the export finds) get
none: the step says why, and the bundle is run with `modelplan generate`."""

from __future__ import annotations

import shutil

from executors.generation import stages
from executors.onnx.artifacts import MODEL
from executors.onnx.iospecs import io_specs
from executors.run.step_api import StepContext, StepResult
from executors.runtime import shared_context
from executors.store.weights import link_blobs
from planner.core.targets import of_params
from planner.models.generation import genai_stages_not
from planner.models.roles import CACHE, prompt_and_token


def run(ctx: StepContext) -> StepResult:
    import onnx

    p = ctx.params
    graphs = prompt_and_token(list(ctx.inputs))
    specs = {g: [s["name"] for s in io_specs(ctx.input_model(g))[0]] for g in graphs}
    why_not = genai_stages_not(None, specs)  # the plan checked the cache's geometry
    if why_not and any(CACHE.is_state(n) for names in specs.values() for n in names):
        # a layer's recurrent state, which the export found and the plan cannot see
        ctx.progress(f"  no genai stages: {why_not}")
        return StepResult(metrics={"stages": None, "why_not": why_not, "reads": list(graphs)})
    if why_not:
        raise ctx.fail(f"genai's pipeline stages: {why_not}", "re-plan the build (modelplan "
                       "plan): the plan stages only graphs genai's pipeline feeds")
    staged = ctx.out / ".sources"  # each stage graph, the weights beside them
    staged.mkdir()
    token = onnx.load(str(ctx.input_model(graphs[1])), load_external_data=False)
    slots = stages.slots_of(token)
    sources = []
    for name, graph in zip(stages.STAGES, graphs, strict=True):
        src = ctx.input_model(graph).parent
        model = token if graph == graphs[1] else \
            onnx.load(str(src / MODEL), load_external_data=False)
        path = staged / stages.FILES[name]
        onnx.save(stages.stage(model, slots), str(path))
        sources.append(path)
        link_blobs(src, staged)  # the weights both graphs read, once
    target = of_params(p)
    ctx.progress("  compiling the prompt and token stages (child processes)")
    models = shared_context.compile_group(target, sources, ctx.out, p["provider_options"],
                                          share=False)
    shutil.rmtree(staged)
    binaries = shared_context.binaries_of(models)
    ctx.progress("  opening the stages and running each once (child process)")
    problem = shared_context.load_problem(target, models, p["provider_options"], shared=False)
    if problem:
        raise ctx.fail(f"genai's compiled stages do not run here: {problem}",
                       "compile the stage graphs alone to see why", where=str(ctx.out))
    return StepResult(metrics={
        "stages": {name: m.name for name, m in zip(stages.STAGES, models, strict=True)},
        "reads": list(graphs), "binaries": [b.name for b in binaries],
        "binary_bytes": sum(b.stat().st_size for b in binaries), "slots": slots,
        "window": p["window"]})
