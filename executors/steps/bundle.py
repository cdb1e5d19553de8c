"""bundle: an encoder-decoder model's graphs delivered together, as `encoder_model.onnx` and
`decoder_model.onnx` (hard links to their store entries where the filesystem allows, copies
otherwise) with `bundle.json` naming each graph's source step and I/O."""

from __future__ import annotations

import json

from executors.onnx.artifacts import MODEL
from executors.run.wrapper import StepContext, StepResult
from executors.samples import io_specs
from executors.store.weights import WEIGHTS, link_or_copy


def run(ctx: StepContext) -> StepResult:
    described = {}
    for graph in ctx.params["graphs"]:
        src_dir = ctx.inputs[graph]
        for f in sorted(src_dir.iterdir()):
            if f.name == MODEL or f.name.startswith(f"{MODEL}."):  # the model and its weights
                link_or_copy(f, ctx.out / f"{graph}_{f.name}")
        for blob in sorted((src_dir / WEIGHTS).glob("*")):  # named by content: graphs share them
            (ctx.out / WEIGHTS).mkdir(exist_ok=True)
            if not (ctx.out / WEIGHTS / blob.name).exists():
                link_or_copy(blob, ctx.out / WEIGHTS / blob.name)
        inputs, outputs = io_specs(src_dir / MODEL)
        described[graph] = {"model": f"{graph}_{MODEL}", "from": ctx.step["inputs"][graph],
                            "inputs": inputs, "outputs": outputs}
    (ctx.out / "bundle.json").write_text(json.dumps(described, indent=2, sort_keys=True))
    return StepResult(metrics={"graphs": list(described)})
