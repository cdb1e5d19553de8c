"""compile: EPContext generation on the QNN EP (HTP backend). CPU fallback is off unless the
target allows it, so the artifact runs wholly on the NPU; a failure is a failure, with QNN's
own message and the offending nodes, never a silent fallback to the uncompiled model."""

from __future__ import annotations

import numpy as np

from executors import qnn
from executors.artifacts import MODEL, load, save, set_meta
from executors.base import StepContext, StepResult
from executors.samples import batches, io_specs


def run(ctx: StepContext) -> StepResult:
    p = ctx.params
    src = ctx.input_model()
    out = ctx.out / MODEL
    configs = {"ep.context_enable": "1", "ep.context_file_path": str(out),
               "ep.context_embed_mode": "1" if p["embed_context"] else "0"}
    ctx.progress(f"  compiling for {p['target']} (cpu fallback {'on' if p['cpu_fallback'] else 'off'})")
    try:
        with qnn.native_log() as log:
            so = qnn.session_options(p["ep"], p["backend"], p["provider_options"],
                                     p["cpu_fallback"], configs)
            qnn.session(src, p["ep"], so=so)
    except Exception as exc:
        errors, nodes = qnn.qnn_errors(log)
        cause = str(exc).strip().splitlines()[0]
        said = [e for e in errors if e not in cause and "Unsupported nodes" not in e][:1]
        detail = "".join(f"; QNN: {e}" for e in said)
        detail += f"; offending node(s): {', '.join(nodes[:5])}" if nodes else ""
        raise ctx.fail(f"{p['ep'].upper()} compile failed: {cause}{detail}",
                       "fix what QNN reports (target.provider_options; or legalize/quantize so "
                       "the backend supports every node), or set target.cpu_fallback=true to "
                       "allow CPU nodes") from exc
    if not out.is_file():
        raise ctx.fail("the EP wrote no EPContext model", "check target.provider_options")
    model = load(out)
    set_meta(model, "modelplan.compiled_from", ctx.step["inputs"]["model"])
    save(model, out)
    return StepResult(metrics={**_validate(ctx), "context_nodes": sum(
        n.op_type == "EPContext" for n in model.graph.node), "nodes": len(model.graph.node)})


def _validate(ctx: StepContext) -> dict[str, float]:
    """Load the compiled model as a user would (no CPU fallback) and run sample inputs."""
    p = ctx.params
    path = ctx.out / MODEL
    specs, _ = io_specs(ctx.input_model())
    try:
        with qnn.native_log():
            sess = qnn.session(path, p["ep"], p["backend"], p["provider_options"],
                               cpu_fallback=p["cpu_fallback"])
    except Exception as exc:
        raise ctx.fail(f"the compiled model does not load: {str(exc).splitlines()[0]}",
                       "report this model", where=str(path)) from exc
    for feed in batches(specs, 1, "verify"):
        for value in sess.run(None, feed):
            if not np.all(np.isfinite(value)):
                raise ctx.fail("the compiled model produces NaN or Inf on a sample input",
                               "check legalization and quantization ranges", where=str(path))
    return {"validation_samples": 1}
