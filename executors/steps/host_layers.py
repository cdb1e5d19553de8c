"""host_layers: a causal LM's embedding table and/or head (export.on_host) as small fp32 ONNX
graphs the host CPU runs beside the target's: `embed_model.onnx` (input_ids -> inputs_embeds)
and `head_model.onnx` (hidden_states -> logits), each of any sequence length. The model's
own modules are exported (its input embeddings, its output embeddings), so what the graphs on
the target leave out is exactly what these compute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from executors.onnx.artifacts import load, save
from executors.run.step_api import StepContext, StepResult
from executors.runtime import torchmodel

FILES = {"embeddings": "embed_model.onnx", "head": "head_model.onnx"}
TOLERANCE = 1e-4


def run(ctx: StepContext) -> StepResult:
    import torch

    model, _ = torchmodel.load(ctx.inputs["source"])
    width = model.get_input_embeddings().embedding_dim
    made = {}
    for layer in ctx.params["layers"]:
        path = ctx.out / FILES[layer]
        if layer == "embeddings":
            module, name, out = model.get_input_embeddings(), "input_ids", "inputs_embeds"
            sample = torch.arange(4, dtype=torch.int64)[None]
        else:
            module, name, out = model.get_output_embeddings(), "hidden_states", "logits"
            sample = torch.randn(1, 4, width)
        ctx.progress(f"  exporting the {layer} for the host")
        _export(module.eval(), sample, name, out, path)
        made[layer] = {"model": path.name, "max_abs": _check(path, module, sample, name)}
    return StepResult(metrics={"layers": made})


def _export(module: Any, sample: Any, name: str, out: str, path: Path) -> None:
    import torch

    tmp = path.with_name(f".{path.name}")
    with torch.no_grad():
        torch.onnx.export(module, (sample,), str(tmp), input_names=[name], output_names=[out],
                          dynamic_axes={name: {1: "sequence"}, out: {1: "sequence"}},
                          opset_version=17, dynamo=False)
    save(load(tmp), path)  # its weights as content-addressed blobs beside it
    for leftover in tmp.parent.glob(f"{tmp.name}*"):
        leftover.unlink()


def _check(path: Path, module: Any, sample: Any, name: str) -> float:
    """The graph against the module on another length than the traced one."""
    import onnxruntime as ort
    import torch

    longer = torch.cat([sample, sample], dim=1)
    with torch.no_grad():
        want = module(longer).float().numpy()
    from executors.runtime.adapters import host_providers

    got = ort.InferenceSession(str(path), providers=host_providers()).run(
        None, {name: longer.numpy()})[0]
    worst = float(np.abs(got - want).max())
    if worst > TOLERANCE:
        raise ValueError(f"{path.name} differs from the module by {worst:.3g}")
    return worst
