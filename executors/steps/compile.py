"""compile: EPContext generation on the QNN EP (HTP backend). CPU fallback is off unless the
target allows it, so the artifact runs wholly on the NPU; a failure is a failure, with QNN's
own message and the offending nodes, never a silent fallback to the uncompiled model.

The hierarchy tags of the compiled graph are kept beside the EPContext model
(`node_tags.json`), so a profile of the compiled model can be read per module. A set of
pieces (from extract) is compiled piece by piece. A graph cut into parts (split) is compiled
one part per step (`part`): each step carries the other parts as they are, so the last holds
them all compiled, and a compile that fails on part k re-runs from part k alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from executors.onnx import pieces
from executors.onnx.artifacts import MODEL, load, save, set_meta
from executors.onnx.iospecs import io_specs
from executors.run.step_api import StepContext, StepResult
from executors.runtime.adapters import adapter
from executors.runtime.breakdown import write_node_tags
from executors.runtime.nativelog import native_log
from executors.samples import batches
from executors.store.weights import link_or_copy
from planner.core.targets import of_params


def run(ctx: StepContext) -> StepResult:
    src_dir = ctx.inputs["model"]
    found = pieces.index(src_dir)
    part = ctx.params.get("part")
    if found is None and part is None:
        return StepResult(metrics=compile_model(ctx, src_dir, ctx.out))
    if part is not None and (found is None or not found.get("parts")
                             or part >= len(found["pieces"])):
        raise ctx.fail(f"compile of part {part}: the input is not a graph cut into more than "
                       f"{part} parts", "re-plan the build (modelplan plan) so split comes "
                       "first", where=str(src_dir))
    totals = {"context_nodes": 0, "nodes": 0, "validation_samples": 0}
    for n, piece in enumerate(found["pieces"]):
        (ctx.out / piece["dir"]).mkdir()
        if part is not None and n != part:  # another step's part: carried as hard links
            shutil.copytree(src_dir / piece["dir"], ctx.out / piece["dir"], dirs_exist_ok=True,
                            copy_function=lambda a, b: link_or_copy(Path(a), Path(b)))
            continue
        ctx.progress(f"  piece {piece['dir']}: {piece['tag']}")
        got = compile_model(ctx, src_dir / piece["dir"], ctx.out / piece["dir"])
        totals = {k: totals[k] + got[k] for k in totals}
    shutil.copy2(src_dir / pieces.PIECES, ctx.out / pieces.PIECES)
    return StepResult(metrics={**totals, "pieces": len(found["pieces"]),
                               **({"part": part} if part is not None else {})})


def compile_model(ctx: StepContext, src_dir: Path, out_dir: Path) -> dict[str, int]:
    """Compile the model in `src_dir` into `out_dir`, load it back and run it once."""
    p = ctx.params
    target = of_params(p)
    runtime = adapter(target)
    src, out = src_dir / MODEL, out_dir / MODEL
    configs = {"ep.context_enable": "1", "ep.context_file_path": str(out),
               "ep.context_embed_mode": "1" if p["embed_context"] else "0"}
    fallback = "on" if p["cpu_fallback"] else "off"
    ctx.progress(f"  compiling for {p['target']} (cpu fallback {fallback})")
    try:
        with native_log() as log:
            so = runtime.session_options(target, p["provider_options"], p["cpu_fallback"],
                                         configs)
            runtime.session(src, target, so=so)
    except Exception as exc:
        errors, nodes = runtime.errors(log)
        cause = str(exc).strip().splitlines()[0]
        said = [e for e in errors if e not in cause and "Unsupported nodes" not in e][:1]
        detail = "".join(f"; QNN: {e}" for e in said)
        detail += f"; offending node(s): {', '.join(nodes[:5])}" if nodes else ""
        raise ctx.fail(f"{target.ep.upper()} compile failed: {cause}{detail}",
                       "fix what QNN reports (target.provider_options; or legalize/quantize so "
                       "the backend supports every node), or set target.cpu_fallback=true to "
                       "allow CPU nodes", where=str(src)) from exc
    if not out.is_file():
        raise ctx.fail("the EP wrote no EPContext model", "check target.provider_options")
    model = load(out)
    set_meta(model, "modelplan.compiled_from", ctx.step["inputs"]["model"])
    save(model, out)
    write_node_tags(out_dir, load(src, external=False).graph, ctx.step["inputs"]["model"])
    pieces.carry(src_dir, out_dir)
    return {**_validate(ctx, src_dir, out_dir), "context_nodes": sum(
        n.op_type == "EPContext" for n in model.graph.node), "nodes": len(model.graph.node)}


def _validate(ctx: StepContext, src_dir: Path, out_dir: Path) -> dict[str, int]:
    """Load the compiled model as a user would (no CPU fallback) and run sample inputs."""
    p = ctx.params
    target = of_params(p)
    path = out_dir / MODEL
    recorded = pieces.feeds(src_dir)
    feeds = [recorded] if recorded is not None else \
        batches(io_specs(src_dir / MODEL)[0], 1, "verify")
    try:
        with native_log():
            sess = adapter(target).session(path, target, p["provider_options"],
                                           cpu_fallback=p["cpu_fallback"])
    except Exception as exc:
        raise ctx.fail(f"the compiled model does not load: {str(exc).splitlines()[0]}",
                       "report this model", where=str(path)) from exc
    for feed in feeds:
        for value in sess.run(None, feed):
            if not np.all(np.isfinite(value)):
                raise ctx.fail("the compiled model produces NaN or Inf on a sample input",
                               "check legalization and quantization ranges", where=str(path))
    return {"validation_samples": len(feeds)}
