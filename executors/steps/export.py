"""export: torch -> ONNX (TorchScript tracing or dynamo), with I/O specs in the model's
metadata and the module hierarchy in a sidecar. The export writes no node metadata."""

from __future__ import annotations

import ast
import contextlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from executors import hierarchy
from executors.artifacts import (
    MODEL,
    REPORT,
    SIDECAR,
    SOURCE,
    clear_node_meta,
    load,
    save,
    set_meta,
)
from executors.base import StepContext, StepResult
from executors.inputs import batches
from planner.compose import did_you_mean

OUTPUTS = {"feature-extraction": ["last_hidden_state"], "fill-mask": ["logits"],
           "text-classification": ["logits"], "token-classification": ["logits"],
           "question-answering": ["start_logits", "end_logits"]}
WRAPPER_PREFIX = "model"
TOLERANCE = 1e-4


def load_torch_model(source: Path) -> tuple[Any, dict[str, Any]]:
    import transformers

    info = json.loads((source / SOURCE).read_text())
    ckpt = Path(info["checkpoint"])
    ckpt = ckpt if ckpt.is_absolute() else source / ckpt
    cls = getattr(transformers, info["model_class"] or "", None) or transformers.AutoModel
    model = cls.from_pretrained(str(ckpt), attn_implementation="eager", local_files_only=True)
    return model.eval(), info


def wrapper(model: Any, input_names: list[str], output_names: list[str]) -> Any:
    """A module with an explicit positional forward, as TorchScript tracing needs for HF models."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model  # attribute name == WRAPPER_PREFIX

        def forward(self, *args: Any) -> Any:
            out = self.model(**dict(zip(input_names, args, strict=True)), return_dict=True)
            values = tuple(out[name] for name in output_names)
            return values[0] if len(values) == 1 else values

    return Wrapper().eval()


def run(ctx: StepContext) -> StepResult:
    import torch

    model, info = load_torch_model(ctx.inputs["model"])
    specs = ctx.params["inputs"]
    names = [s["name"] for s in specs]
    outputs = OUTPUTS.get(info["task"] or "feature-extraction", ["last_hidden_state"])
    wrapped = wrapper(model, names, outputs)
    feed = batches(specs, 1, "verify", source=ctx.inputs["model"])[0]
    args = tuple(torch.from_numpy(feed[n]) for n in names)
    keep = _kept_classes(ctx, model)
    with torch.no_grad():
        scopes, folded = hierarchy.executed_modules(model, lambda: wrapped(*args), keep)
        expected = wrapped(*args)
    path = ctx.out / MODEL
    ctx.progress(f"exporting with {ctx.params['exporter']}, opset {ctx.params['opset']}")
    _export(ctx, wrapped, args, names, outputs, path)
    onnx_model = load(path)
    clear_node_meta(onnx_model)  # node metadata is written by tag, after every rewrite
    out_specs = [{"name": n, "dtype": "float32"} for n in outputs]
    set_meta(onnx_model, "winml.io.inputs", json.dumps(specs, sort_keys=True))
    set_meta(onnx_model, "winml.io.outputs", json.dumps(out_specs, sort_keys=True))
    root = scopes.get("", f"/{type(model).__name__}")
    meta = hierarchy.sidecar([n.name for n in onnx_model.graph.node], scopes, WRAPPER_PREFIX, root,
                             folded)
    save(onnx_model, path)
    (ctx.out / SIDECAR).write_text(json.dumps(meta, indent=1, sort_keys=True))
    if ctx.params["report"]:
        (ctx.out / REPORT).write_text(hierarchy.report(meta))
    max_abs = _check_against_torch(ctx, path, feed, expected)
    return StepResult(metrics={"nodes": meta["coverage"]["nodes"], "coverage": meta["coverage"],
                               "traced_modules": len(meta["traced_modules"]),
                               "max_abs_vs_torch": max_abs})


def _kept_classes(ctx: StepContext, model: Any) -> frozenset[str]:
    """export.torch_modules, each checked to be a module class of this model."""
    keep = ctx.params["torch_modules"]
    unknown = hierarchy.unknown_classes(model, keep)
    if unknown:
        have = sorted({type(m).__name__ for m in model.modules()
                       if hierarchy.inlined(m, frozenset())})
        hint = did_you_mean(unknown[0], have)
        raise ctx.fail(f"export.torch_modules: {', '.join(map(repr, unknown))} "
                       f"{'is' if len(unknown) == 1 else 'are'} not a module class of "
                       f"{type(model).__name__}{hint}",
                       f"name classes it inlines: {', '.join(have) or 'none'}")
    return frozenset(keep)


def _export(ctx: StepContext, wrapped: Any, args: tuple, names: list[str],
            outputs: list[str], path: Path) -> None:
    import torch

    dynamo = ctx.params["exporter"] == "dynamo"
    # the dynamo exporter reports progress on stdout, which belongs to `--json` output
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(wrapped, args, str(path), input_names=names, output_names=outputs,
                              opset_version=ctx.params["opset"], dynamo=dynamo,
                              do_constant_folding=True, external_data=False)
        except Exception as exc:
            raise ctx.fail(f"torch.onnx.export raised {type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
                           "try export=torchscript or another export.opset") from exc
    if dynamo:
        _rename_dynamo_nodes(path)


def _rename_dynamo_nodes(path: Path) -> None:
    """Give dynamo-exported nodes TorchScript-style scoped names from their name scopes
    (`['', 'model', 'model.encoder', ..., 'op']`: the deepest module path, then the op)."""
    model = load(path)
    for i, node in enumerate(model.graph.node):
        raw = {p.key: p.value for p in node.metadata_props}.get("pkg.torch.onnx.name_scopes")
        modules = [s for s in ast.literal_eval(raw)[:-1] if s] if raw else []
        module = modules[-1] if modules else ""
        node.name = "/" + "/".join([*module.split("."), f"{node.op_type}_{i}"]) if module \
            else f"{node.op_type}_{i}"
    save(model, path)


def _check_against_torch(ctx: StepContext, path: Path, feed: dict, expected: Any) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feed)
    want = expected if isinstance(expected, tuple) else (expected,)
    max_abs = max(float(np.max(np.abs(g - w.numpy()))) for g, w in zip(got, want, strict=True))
    if not max_abs <= TOLERANCE:
        raise ctx.fail(f"ONNX Runtime output differs from torch by {max_abs:.3g} "
                       f"(tolerance {TOLERANCE})", "try export=torchscript or another opset",
                       where=str(path))
    return max_abs
