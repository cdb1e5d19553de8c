"""export: one graph of the model (the whole model, or an encoder-decoder's encoder or
decoder) from torch to ONNX (TorchScript tracing or dynamo), with I/O specs in the model's
metadata and the module hierarchy in a sidecar (unless export.hierarchy=false). The export
writes no node metadata; its output is checked against torch on a real sample."""

from __future__ import annotations

import ast
import contextlib
import gc
import itertools
import json
import re
import shutil
import sys
import warnings
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
from executors.onnx.free_axes import free_axes, past_axes
from executors.run.step_api import StepContext, StepResult
from executors.runtime import narrow, torch_initializers, torchmodel, torchops
from executors.runtime.adapters import host_providers
from executors.runtime.nativelog import fd1_to_stderr
from executors.samples import Samples
from planner.models.roles import Trace, role_of
from planner.support.suggest import did_you_mean

TOLERANCE = 1e-4  # of each output's peak magnitude
# a checkpoint traced in bf16 or fp16: the constants the model makes in its own dtype (a scale,
# an epsilon, a mask's fill) are rounded to it, and move the output by up to ~3e-4 of its peak
# (gpt2, gemma2, gemma3, codegen measured); an export bug moves it by far more
NARROW_TOLERANCE = 1e-3
FLOOR = float(np.finfo(np.float32).tiny)  # for an all-zero output
COLLECT_BYTES = 256 * 2**20  # weights from which export collects garbage to free them at once


def run(ctx: StepContext) -> StepResult:
    """A checkpoint saved in 16 bits is traced as saved (runtime/narrow.py: no fp32 copy of its
    weights); one whose code or constants the narrow trace changes is exported from an fp32
    copy, as every other checkpoint is."""
    saved = ctx.params.get("upcast") if ctx.params["exporter"] != "dynamo" else None
    if saved in narrow.NARROW:  # bfloat16, float16 (another dtype is loaded as fp32)
        try:
            return _run(ctx, saved)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the fp32 export decides
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if first.startswith(f"step {ctx.id} "):  # the cause, without where and the fix
                first = first.split(": ", 1)[-1].rsplit("; ", 1)[0]
            ctx.progress(f"  traced in {saved}: {first[:240]}; exporting an fp32 copy")
            for leftover in ctx.out.iterdir():
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
            gc.collect()
    return _run(ctx, "float32")


def _run(ctx: StepContext, dtype: str) -> StepResult:
    import torch

    p = ctx.params
    model, _info = torchmodel.load(ctx.inputs["model"], dtype)
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
    what = f" the {p['graph']}" if p["graph"] else ""
    ctx.progress(f"exporting{what} with {p['exporter']}, opset {p['opset']}")
    axes = None if not p.get("dynamic") else past_axes(names, outputs) if free_past \
        else free_axes(args, names, expected, outputs)
    used = _export(ctx, module, traced, names, outputs, path, axes, kind)
    if kind is not None:  # the reference: the same weights in fp32, one tensor at a time
        model.float()
        with torch.no_grad():
            expected = module(*args)
    model_name = type(model).__name__
    weight_bytes = sum(t.numel() * t.element_size()
                       for t in itertools.chain(model.parameters(), model.buffers()))
    model = module = None  # the torch weights: from here on, the ONNX copy is the only one
    if weight_bytes >= COLLECT_BYTES:  # a full collection frees them now, at ~0.3 s a time
        gc.collect()
    onnx_model = _described(path, specs, outputs, args, used, p["opset"])
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
    metrics["max_abs_vs_torch"] = _check_against_torch(
        ctx, path, feed, expected, NARROW_TOLERANCE if kind else TOLERANCE)
    return StepResult(metrics=metrics)


def _described(path: Path, specs: list[dict[str, Any]], outputs: list[str], args: tuple,
               used: Opset, asked: int) -> onnx.ModelProto:
    """The exported graph with its I/O specs (and the opset it was raised to) in its metadata,
    saved; its node metadata cleared (tag writes it, after every rewrite)."""
    onnx_model = load(path, external=False)  # metadata only: the weights are read once, by save
    clear_node_meta(onnx_model)
    _keep_unread_inputs(onnx_model, [s["name"] for s in specs], args)
    out_specs = [{"name": n, "dtype": "float32"} for n in outputs]
    set_meta(onnx_model, "winml.io.inputs", json.dumps(specs, sort_keys=True))
    set_meta(onnx_model, "winml.io.outputs", json.dumps(out_specs, sort_keys=True))
    if used.opset != asked:
        set_meta(onnx_model, OPSET_RAISED_KEY, json.dumps(
            {"from": asked, "to": used.opset, "why": used.why}, sort_keys=True))
    save(onnx_model, path)
    return onnx_model


def _keep_unread_inputs(model: onnx.ModelProto, names: list[str], args: tuple) -> None:
    """Put back the inputs the exporter dropped because the model never reads them (a causal
    LM whose forward takes no position ids derives them from the attention mask: BLOOM's
    ALiBi), in their declared place: every graph of a role takes the role's inputs, as the
    host feeds them."""
    kept = {i.name for i in model.graph.input}
    if all(n in kept for n in names):
        return
    made = {n: onnx.helper.make_tensor_value_info(
        n, onnx.helper.np_dtype_to_tensor_dtype(a.numpy().dtype), list(a.shape))
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
                       "values, LinearAttention states): a model that does not run on them (a "
                       "cache class of its own, linear-attention layers alone) is not supported"
                       ) from None
    except geometry.Uncarried as exc:
        raise ctx.fail(str(exc), "the graphs carry one key and one value buffer per layer "
                       "of the cache a model's config makes: not supported") from None
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
            narrow_type: int | None) -> Opset:
    try:
        used = export_graph(module, args, names, outputs, path, ctx.params["exporter"],
                            ctx.params["opset"], axes, narrow_type)
    except ExportFailed as exc:
        raise ctx.fail(str(exc), "try another exporter (export=dynamo or export=torchscript) "
                       "or export.opset") from exc.__cause__
    if used.opset != ctx.params["opset"]:
        ctx.progress(f"  opset {ctx.params['opset']} cannot express {used.why}: exported at "
                     f"opset {used.opset}")
    return used


class ExportFailed(Exception):
    """torch.onnx.export raised; the message is its first line."""


@dataclass(frozen=True)
class Opset:
    """The opset an export was written at, and why when it is not the configured one."""

    opset: int
    why: str = ""


NEWEST_OPSET = 21  # what the planner lets export.opset be (planner/recipes/export.py: 14 to 21)
# torch: "Exporting the operator 'aten::col2im' to ONNX opset version 17 is not supported.
# Support for this operator was added in version 18, try exporting with this version."
_TOO_OLD = re.compile(r"operator '([^']+)' to ONNX opset version (\d+) is not supported")
_ADDED_IN = re.compile(r"added in version (\d+)")
# torch's tracer, on an operator called with an argument its schemas do not take:
# "... We don't have an op for aten::where but it isn't a special case.  Argument types: ..."
_NO_SCHEMA = re.compile(r"We don't have an op for (\S+) but it isn't a special case\.\s+"
                        r"Argument types: (.*)$")


def export_graph(module: Any, args: tuple, names: list[str], outputs: list[str], path: Path,
                 exporter: str, opset: int, axes: dict[str, dict[int, str]] | None = None,
                 narrow_type: int | None = None) -> Opset:
    """torch -> ONNX at `path` (TorchScript tracing, or dynamo with TorchScript-style names), at
    `opset` or, when an operator needs a newer one, at the lowest newer one that expresses
    every operator (the one torch names, else the next, up to the exporter's newest and
    NEWEST_OPSET): the same model and configured opset always give the same graph. `axes`:
    the axes left free (name -> axis -> label); none: every shape fixed as traced. A module
    traced in bf16 or fp16 (`narrow_type`) gives its graph widened to fp32."""
    from torch.onnx import _constants

    newest = min(NEWEST_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET
                 if exporter != "dynamo" else _constants.ONNX_MAX_OPSET)
    at, why = opset, ""
    while True:
        try:
            _export_once(module, args, names, outputs, path, exporter, at, axes, narrow_type)
            return Opset(at, why)
        except ExportFailed as exc:
            too_old = _TOO_OLD.search(str(exc))
            if too_old is None or at >= newest:
                raise
            added = _ADDED_IN.search(str(exc))
            nxt = max(at + 1, int(added.group(1))) if added else at + 1
            if nxt > newest:
                raise
            why = f"{too_old.group(1)} (added in opset {nxt})" if added else \
                f"{too_old.group(1)} (not in opset {at})"
            at = nxt


def _export_once(module: Any, args: tuple, names: list[str], outputs: list[str], path: Path,
                 exporter: str, opset: int, axes: dict[str, dict[int, str]] | None,
                 narrow_type: int | None) -> None:
    import torch

    dynamo = exporter == "dynamo"
    if not dynamo and opset >= torchops.COL2IM_OPSET:
        torchops.register_col2im()
    if not dynamo and opset >= torchops.OPSET:
        torchops.register()
    # the dynamo exporter reports progress on stdout, and the TorchScript one its graph when an
    # operator fails, from native code: stdout belongs to `--json` output
    # TorchScript's weights are held back and stored one at a time (torch_initializers)
    held_back = contextlib.nullcontext({}) if dynamo else torch_initializers.held_back()
    # calls the tracer cannot take (complex numbers, bool fill values) traced as equal ones;
    # dynamo's optimizer keeps an Add of 1e-8 (an RMSNorm's eps) it would take for one of zero
    from executors.runtime import exact_no_ops, torchcalls  # imports torch

    replaced = exact_no_ops.exact() if dynamo else torchcalls.replaced()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr), fd1_to_stderr(), \
            held_back as held, replaced:
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs,
                              opset_version=opset, dynamo=dynamo, do_constant_folding=True,
                              external_data=True, dynamic_axes=axes)  # dynamo: no 2 GB limit
        except Exception as exc:
            text = str(exc).strip()
            first = text.splitlines()[0] if text else ""
            no_schema = _NO_SCHEMA.search(first)
            if no_schema:  # the tracer's internal assert, said as what the model passed
                first = (f"the TorchScript tracer has no {no_schema.group(1)} taking "
                         f"({no_schema.group(2).strip(' ,')}): the model passes a Python "
                         "value of a type the operator's schema does not take")
            raise ExportFailed(f"torch.onnx.export raised {type(exc).__name__}: {first}") \
                from exc
    if not dynamo:
        graph = onnx.load(str(path), load_external_data=False)
        if narrow_type is not None:  # before store: each weight is written as fp32
            narrow.widen(graph, narrow_type)
        changed = torchops.positive_perms(graph) > 0 or bool(held) or narrow_type is not None
        if held:  # (store empties held)
            torch_initializers.store(graph, held, path.parent)
        if changed:
            onnx.save_model(graph, str(path))
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


def _check_against_torch(ctx: StepContext, path: Path, feed: dict, expected: Any,
                         share: float = TOLERANCE) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.disable_prepacking", "1")  # no packed weight copies
    session = ort.InferenceSession(str(path), so, providers=host_providers())
    got = session.run(None, feed)
    want = expected if isinstance(expected, tuple) else (expected,)
    found = differences(got, [w.numpy() for w in want], share)
    for out, d in zip(session.get_outputs(), found, strict=True):
        if not d.within:
            raise ctx.fail(f"ONNX Runtime's {out.name} differs from torch by {d.max_abs:.3g} "
                           f"(tolerance {d.tolerance:.3g}: {share:g} of its peak "
                           f"{d.peak:.3g})",
                           "try another exporter (export=dynamo or export=torchscript) or opset",
                           where=str(path))
    return max(d.max_abs for d in found)


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
