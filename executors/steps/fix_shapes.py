"""fix_shapes{inputs}: a graph exported with free batch and sequence axes made the graph of
fixed shapes a compiling target needs, so that one export serves every target of a sweep. Each
graph input gets the static shape the plan names, ONNX shape inference gives every tensor and
output its static shape, and the normalize step after it folds what became constant (the
Shape, Gather and Concat chains the free axes needed). Node names and their hierarchy metadata
are kept, so tags and module selectors read this graph as they read the export."""

from __future__ import annotations

from executors.onnx.artifacts import MODEL, load, save
from executors.run.step_api import StepContext, StepResult


def run(ctx: StepContext) -> StepResult:
    path = ctx.input_model()
    model = load(path, external=False)
    wanted = {i["name"]: list(i["shape"]) for i in ctx.params["inputs"]}
    given = {i.name: i for i in model.graph.input}
    missing = sorted(set(wanted) - set(given))
    if missing:
        raise ctx.fail(f"the exported graph has no input(s) {missing} to fix (it takes "
                       f"{sorted(given)})", "re-run the export step (its graph is not the one "
                       "the plan describes)")
    freed = 0
    for name, shape in wanted.items():
        dims = given[name].type.tensor_type.shape.dim
        if len(dims) != len(shape):
            raise ctx.fail(f"input {name!r} has rank {len(dims)}, and the plan fixes it to "
                           f"{shape}", "set export.shapes.* to shapes of the graph's rank")
        for dim, size in zip(dims, shape):
            if dim.HasField("dim_param") or dim.dim_value != size:
                freed += 1
            dim.Clear()
            dim.dim_value = int(size)
    for out in model.graph.output:  # unknown: shape inference sets them once normalize folds
        for dim in out.type.tensor_type.shape.dim:
            dim.Clear()
    del model.graph.value_info[:]
    save(model, ctx.out / MODEL, base=path.parent)
    return StepResult(metrics={"axes_fixed": freed})

