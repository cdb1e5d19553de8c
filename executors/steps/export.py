"""export: one graph of the model (the whole model, or an encoder-decoder's encoder or
decoder) from torch to ONNX (TorchScript tracing or dynamo), with I/O specs in the model's
metadata and the module hierarchy in a sidecar (unless export.hierarchy=false). The export
writes no node metadata; its output is checked against torch on a real sample."""

from __future__ import annotations

import gc
import itertools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from executors.generation import geometry
from executors.generation.modules import gives_cross, graph_module
from executors.generation.recurrent import RecurrentState
from executors.onnx import hierarchy
from executors.onnx.artifacts import (
    MODEL,
    OPSET_RAISED_KEY,
    REPORT,
    SIDECAR,
    clear_node_meta,
    load,
    save,
    set_meta,
)
from executors.onnx.free_axes import fix_axes, free_axes, past_axes, shorter
from executors.run.step_api import StepContext, StepResult
from executors.runtime import dense_experts, narrow, torchmodel
from executors.runtime.adapters import host_providers
from executors.runtime.torch_onnx import ExportFailed, Opset, export_graph, start_opset
from executors.samples import Samples
from planner.errors import StepError
from planner.models.roles import Trace, role_of
from planner.support.suggest import did_you_mean

EXPORTER_FIX = "try another exporter (export=dynamo or export=torchscript) or export.opset"
TOLERANCE = 1e-4  # of each output's peak magnitude
# a checkpoint traced in bf16 or fp16: the constants the model makes in its own dtype (a scale,
# an epsilon, a mask's fill) are rounded to it, and move the output by up to ~3e-4 of its peak
# (gpt2, gemma2, gemma3, codegen measured); an export bug moves it by far more
NARROW_TOLERANCE = 1e-3
FLOOR = float(np.finfo(np.float32).tiny)  # for an all-zero output
# what a causal LM whose cache the graphs cannot carry builds as instead
UNCACHED_FIX = ("set export.shapes.decoder_cache=false to build it as one graph run on the "
                "whole prefix for each new token")
COLLECT_BYTES = 256 * 2**20  # weights from which export collects garbage to free them at once
PER_TOKEN = ("boxes",)  # input kinds of several values per token: their sequence axis is free


def run(ctx: StepContext) -> StepResult:
    """A checkpoint saved in 16 bits is traced as saved (runtime/narrow.py: no fp32 copy of its
    weights); one whose code or constants the narrow trace changes is exported from an fp32
    copy, as every other checkpoint is. Where the exporter itself fails on the fp32 copy (it
    raises, or its graph differs from torch), export.fallback's exporter is tried."""
    p = ctx.params
    saved = p.get("upcast") if p["exporter"] != "dynamo" else None
    if saved in narrow.NARROW:  # bfloat16, float16 (another dtype is loaded as fp32)
        try:
            return _run(ctx, saved, p["exporter"])
        except Exception as exc:  # noqa: BLE001 - whatever failed, the fp32 export decides
            said = _cause(ctx, exc)
        # outside the handler: the failed attempt's frames (its model) go with the exception
        ctx.progress(f"  traced in {saved}: {said[:240]}; exporting an fp32 copy")
        _clear(ctx.out)
    other = p.get("fallback")
    try:
        return _run(ctx, "float32", p["exporter"])
    except ExporterFault as exc:
        if not other or other == p["exporter"]:
            raise
        first = exc.cause
    ctx.progress(f"  {p['exporter']} cannot export it ({first[:240]}); exporting with "
                 f"{other} (export.fallback)")
    _clear(ctx.out)
    try:
        result = _run(ctx, "float32", other)
    except Exception as exc:  # noqa: BLE001 - said with the first exporter's cause
        raise ctx.fail(f"{p['exporter']}: {first[:300]}; {other} (export.fallback): "
                       f"{_cause(ctx, exc)[:300]}", "export.opset, or report the model type "
                       "with its config.json", where=getattr(exc, "where", None)) from None
    result.metrics.update(exporter_used=other, exporter_why=first[:400])
    return result


def _cause(ctx: StepContext, exc: Exception) -> str:
    """What failed, in one line: an ExporterFault's cause, a step error without where and
    its fix, else the exception's first line."""
    if isinstance(exc, ExporterFault):
        return exc.cause
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if first.startswith(f"step {ctx.id} "):  # the cause, without where and the fix
        first = first.split(": ", 1)[-1].rsplit("; ", 1)[0]
    return first


def _clear(out: Path) -> None:
    """What a failed attempt left in the step's output folder, and its torch objects."""
    for leftover in out.iterdir():
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    gc.collect()


def _run(ctx: StepContext, dtype: str, exporter: str) -> StepResult:
    import torch

    p = ctx.params
    model, _info = torchmodel.load(ctx.inputs["model"], dtype)
    # an own-loop experts block traced for every input
    dense_experts.densify(model, fixed=not p.get("dynamic"))
    kind = narrow.dtype_of(model) if dtype != "float32" else None
    specs, outputs = p["inputs"], p["outputs"]
    role = role_of(p["graph"], [s["name"] for s in specs])
    specs, outputs, refit = _model_cache(ctx, model, role, specs, outputs)
    names = [s["name"] for s in specs]
    free_past = bool(p.get("dynamic")) and role.reads_cache
    module = graph_module(model, role, names, outputs, free_past)
    samples = Samples(specs, "verify", source=ctx.inputs["model"])
    feed = samples.feeds(1)[0]
    args = tuple(torch.from_numpy(feed[n]) for n in names)
    traced = narrow.cast(args, kind)
    keep = _kept_classes(ctx, model)
    with torch.no_grad():
        ran: list[Any] = []  # the traced forward's result is the reference (a narrow
        # model's is its fp32 forward, after the export): one forward, not two
        if p["hierarchy"]:
            scopes, folded = hierarchy.executed_modules(
                model, lambda: ran.append(module(*traced)), keep)
            base = "" if gives_cross(role, outputs) else torchmodel.traced_base(model, role)
            scopes = hierarchy.rebase(scopes, base)
        else:
            scopes, folded = {}, []
        expected = ran[0] if ran else module(*traced)
    path = ctx.out / MODEL
    axes = None if not p.get("dynamic") else past_axes(names, outputs) if free_past \
        else free_axes(args, names, expected, outputs,
                       frozenset(s["name"] for s in specs if s.get("kind") in PER_TOKEN))
    used = _export(ctx, module, traced, names, outputs, path, axes, kind, exporter)
    expected, second = _references(model, module, args, names, axes, kind, expected)
    model_name = type(model).__name__
    weight_bytes = sum(t.numel() * t.element_size()
                       for t in itertools.chain(model.parameters(), model.buffers()))
    model = module = None  # the torch weights: from here on, the ONNX copy is the only one
    if weight_bytes >= COLLECT_BYTES:  # a full collection frees them now, at ~0.3 s a time
        gc.collect()
    onnx_model = _described(path, specs, outputs, args, used, p["opset"], axes)
    metrics: dict[str, Any] = {"nodes": len(onnx_model.graph.node), "sample": samples.origin,
                               **refit, **({"traced_dtype": dtype} if kind else {})}
    if used.opset != p["opset"]:
        metrics.update(opset_used=used.opset, opset_why=used.why)
    if p["hierarchy"]:
        root = scopes.get("", f"/{model_name}")
        meta = hierarchy.sidecar([n.name for n in onnx_model.graph.node], scopes,
                                 torchmodel.WRAPPER_PREFIX, root, folded)
        (ctx.out / SIDECAR).write_text(json.dumps(meta, indent=1, sort_keys=True))
        if p["report"]:
            (ctx.out / REPORT).write_text(hierarchy.report(meta))
        metrics.update(coverage=meta["coverage"], traced_modules=len(meta["traced_modules"]))
    metrics["max_abs_vs_torch"], holds = _check_against_torch(
        ctx, path, feed, expected, NARROW_TOLERANCE if kind else TOLERANCE, second)
    if not holds:  # axes free in name only
        metrics["axes_fixed"] = fix_axes(path, args, names, expected)
    return StepResult(metrics=metrics)


def _references(model: Any, module: Any, args: tuple, names: list[str],
                axes: dict[str, dict[int, str]] | None, kind: Any,
                expected: Any) -> tuple[Any, tuple[dict[str, Any], Any] | None]:
    """Torch's outputs the graph is checked against: the traced forward's, or for a narrow
    model its fp32 forward (the same weights widened one tensor at a time); and where the
    export leaves a sequence axis free, the feed and outputs at a shorter length (a trace that
    unrolled a loop over the tokens, as RWKV's, holds at its own length only)."""
    import torch

    if kind is not None:
        model.float()
    cut = shorter(args, names, axes)
    with torch.no_grad():
        if kind is not None:
            expected = module(*args)
        feed = None if cut is None else {n: a.numpy() for n, a in zip(names, cut, strict=True)}
        try:
            second = None if cut is None else (feed, module(*cut))
        except Exception:  # noqa: BLE001 - torch itself fails there: the axes do not hold
            second = (feed, None)
    return expected, second


def _holds(session: Any, feed: dict[str, Any], expected: Any, share: float) -> bool:
    """Whether the graph runs on `feed` and gives torch's `expected` (None: torch fails there)
    within `share`, of the same shapes."""
    if expected is None:
        return False
    try:
        got = session.run(None, feed)
    except Exception:  # noqa: BLE001 - ONNX Runtime's own errors derive from Exception alone
        return False
    want = _arrays(expected)
    return [g.shape for g in got] == [w.shape for w in want] and \
        all(d.within for d in differences(got, want, share))


def _arrays(expected: Any) -> list[np.ndarray]:
    """Torch's outputs (one tensor, or a tuple of them) as arrays."""
    return [w.numpy() for w in (expected if isinstance(expected, tuple) else (expected,))]


def _described(path: Path, specs: list[dict[str, Any]], outputs: list[str], args: tuple,
               used: Opset, asked: int,
               axes: dict[str, dict[int, str]] | None = None) -> onnx.ModelProto:
    """The exported graph with its I/O specs (and the opset it was raised to) in its metadata,
    saved; its node metadata cleared (tag writes it, after every rewrite)."""
    onnx_model = load(path, external=False)  # metadata only: the weights are read once, by save
    clear_node_meta(onnx_model)
    _keep_unread_inputs(onnx_model, [s["name"] for s in specs], args, axes or {})
    out_specs = [{"name": n, "dtype": "float32"} for n in outputs]
    set_meta(onnx_model, "winml.io.inputs", json.dumps(specs, sort_keys=True))
    set_meta(onnx_model, "winml.io.outputs", json.dumps(out_specs, sort_keys=True))
    if used.opset != asked:
        set_meta(onnx_model, OPSET_RAISED_KEY, json.dumps(
            {"from": asked, "to": used.opset, "why": used.why}, sort_keys=True))
    save(onnx_model, path)
    return onnx_model


def _keep_unread_inputs(model: onnx.ModelProto, names: list[str], args: tuple,
                        axes: dict[str, dict[int, str]]) -> None:
    """Put back the inputs the exporter dropped because the model never reads them (a causal
    LM whose forward takes no position ids derives them from the attention mask: BLOOM's
    ALiBi; RWKV's forward ignores its mask), in their declared place and with the free axes
    the export gave the others (`axes`): every graph of a role takes the role's inputs, as
    the host feeds them."""
    kept = {i.name for i in model.graph.input}
    if all(n in kept for n in names):
        return
    made = {n: onnx.helper.make_tensor_value_info(
        n, onnx.helper.np_dtype_to_tensor_dtype(a.numpy().dtype),
        [axes.get(n, {}).get(i, d) for i, d in enumerate(a.shape)])
        for n, a in zip(names, args, strict=True) if n not in kept}
    ordered = [made[n] if n in made else next(i for i in model.graph.input if i.name == n)
               for n in names]
    rest = [i for i in model.graph.input if i.name not in names]
    del model.graph.input[:]
    model.graph.input.extend([*ordered, *rest])


def _model_cache(ctx: StepContext, model: Any, role: Any, specs: list[dict[str, Any]],
                 outputs: list[str]) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """A causal LM's graph shaped to the cache the model fills (geometry.graph_io), and the
    metric that says where that differs from the plan's estimate from config.json."""
    if role.trace is not Trace.LM:
        return specs, outputs, {}
    try:
        specs, outputs, said = geometry.graph_io(model, specs, outputs, role.reads_cache)
    except RecurrentState as exc:
        raise ctx.fail(str(exc), "the graphs carry transformers' cache layers (keys and "
                       "values, LinearAttention states), not a cache class of the model's own "
                       f"nor linear-attention layers alone; {UNCACHED_FIX}") from None
    except geometry.Uncarried as exc:
        raise ctx.fail(str(exc), "the graphs carry one key and one value buffer per layer "
                       f"of the cache a model's config makes; {UNCACHED_FIX}") from None
    if said is None:
        return specs, outputs, {}
    ctx.progress(f"  the graph's cache is the model's, not config.json's: {said}")
    return specs, outputs, {"cache_from_model": said}


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


def _export(ctx: StepContext, module: Any, args: tuple, names: list[str],
            outputs: list[str], path: Path, axes: dict[str, dict[int, str]] | None,
            narrow_type: int | None, exporter: str) -> Opset:
    """The export by `exporter`: the configured one at export.opset, the fallback at its
    lowest opset or export.opset if newer."""
    p = ctx.params
    opset = start_opset(exporter, p["exporter"], p["opset"])
    ctx.progress(f"exporting{f' the {g}' if (g := p['graph']) else ''} with {exporter}, "
                 f"opset {opset}")
    try:
        used = export_graph(module, args, names, outputs, path, exporter, opset, axes,
                            narrow_type)
    except ExportFailed as exc:
        raise ExporterFault.of(ctx, str(exc)) from exc.__cause__
    if used.opset != opset:
        ctx.progress(f"  opset {opset} cannot express {used.why}: exported at "
                     f"opset {used.opset}")
    if used.opset != p["opset"] and not used.why:
        return Opset(used.opset, f"the {exporter} exporter's lowest opset (export.fallback)")
    return used


class ExporterFault(StepError):
    """The exporter's own failure: torch.onnx.export raised, or its graph differs from torch
    on the traced sample (what another exporter may not do). `cause`: what failed."""

    def __init__(self, message: str, cause: str, where: str | None) -> None:
        super().__init__(message)
        self.cause, self.where = cause, where

    @classmethod
    def of(cls, ctx: StepContext, cause: str, where: str | None = None) -> ExporterFault:
        return cls(str(ctx.fail(cause, EXPORTER_FIX, where)), cause, where)


def _check_against_torch(ctx: StepContext, path: Path, feed: dict, expected: Any,
                         share: float = TOLERANCE,
                         second: tuple[dict[str, Any], Any] | None = None) -> tuple[float, bool]:
    """The graph's largest difference from torch on the traced feed (beyond `share` of an
    output's peak: the export's fault), and whether it also holds on `second` (a shorter
    feed and torch's outputs there: its free axes are free)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.disable_prepacking", "1")  # no packed weight copies
    try:
        session = ort.InferenceSession(str(path), so, providers=host_providers())
        got = session.run(None, feed)
    except Exception as exc:  # noqa: BLE001 - the exporter's graph: another exporter may do
        raise ExporterFault.of(ctx, "ONNX Runtime cannot run the exported graph "
                               f"({_cause(ctx, exc)})", str(path)) from None
    found = differences(got, _arrays(expected), share)
    for out, d in zip(session.get_outputs(), found, strict=True):
        if not d.within:
            raise ExporterFault.of(ctx, f"ONNX Runtime's {out.name} differs from torch by "
                                   f"{d.max_abs:.3g} (tolerance {d.tolerance:.3g}: {share:g} "
                                   f"of its peak {d.peak:.3g})", str(path))
    return max(d.max_abs for d in found), second is None or _holds(session, *second, share)


@dataclass(frozen=True)
class Difference:
    """One output against torch's: its largest absolute difference and the reference's peak
    magnitude, the scale it is judged at (outputs of 1e-30 are judged at 1e-30, not at 1), and
    the share of that peak it may differ by."""

    max_abs: float
    peak: float
    share: float = TOLERANCE

    @property
    def tolerance(self) -> float:
        return max(self.share * self.peak, FLOOR)

    @property
    def within(self) -> bool:
        return self.max_abs <= self.tolerance  # a NaN is not


def differences(got: list[np.ndarray], want: list[np.ndarray],
                share: float = TOLERANCE) -> list[Difference]:
    found = []
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        found.append(Difference(float(np.max(np.abs(g - w), initial=0.0)),
                                float(np.max(np.abs(w), initial=0.0)), share))
    return found
