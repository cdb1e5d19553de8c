"""torch -> ONNX: one export by TorchScript tracing or dynamo, at the configured opset or the
lowest newer one that expresses every operator; a TorchScript export's weights stored one
tensor at a time, a narrow trace's graph widened to fp32, dynamo's nodes named as
TorchScript's are."""

from __future__ import annotations

import ast
import contextlib
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from executors.onnx.artifacts import load, save
from executors.runtime import narrow, torch_initializers, torchops
from executors.runtime.nativelog import fd1_to_stderr


class ExportFailed(Exception):
    """torch.onnx.export raised; the message is its first line."""


@dataclass(frozen=True)
class Opset:
    """The opset an export was written at, and why when it is not the configured one."""

    opset: int
    why: str = ""


FALLBACK_OPSET = 18  # the dynamo exporter's lowest (export.fallback exports at it or newer)
NEWEST_OPSET = 21  # what the planner lets export.opset be (planner/recipes/export.py: 14 to 21)
# torch: "Exporting the operator 'aten::col2im' to ONNX opset version 17 is not supported.
# Support for this operator was added in version 18, try exporting with this version."
_TOO_OLD = re.compile(r"operator '([^']+)' to ONNX opset version (\d+) is not supported")
_ADDED_IN = re.compile(r"added in version (\d+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# torch's tracer, on an operator called with an argument its schemas do not take:
# "... We don't have an op for aten::where but it isn't a special case.  Argument types: ..."
_NO_SCHEMA = re.compile(r"We don't have an op for (\S+) but it isn't a special case\.\s+"
                        r"Argument types: (.*)$")


def start_opset(exporter: str, configured: str, opset: int) -> int:
    """The opset an export by `exporter` starts at: export.opset for the configured exporter;
    for export.fallback's, its lowest (FALLBACK_OPSET) or export.opset if newer."""
    return opset if exporter == configured else max(opset, FALLBACK_OPSET)


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
                              external_data=True,  # dynamo: no 2 GB limit
                              **_free(names, axes, dynamo))
        except (MemoryError, OSError):  # the machine's, not the exporter's: no other is tried
            raise
        except Exception as exc:
            # dynamo's own error opens with boilerplate (in ANSI colours): the cause is the
            # error torch.export raised
            cause = exc.__cause__ if dynamo and exc.__cause__ is not None else exc
            text = _ANSI.sub("", str(cause)).strip()
            first = text.splitlines()[0] if text else ""
            no_schema = _NO_SCHEMA.search(first)
            if no_schema:  # the tracer's internal assert, said as what the model passed
                first = (f"the TorchScript tracer has no {no_schema.group(1)} taking "
                         f"({no_schema.group(2).strip(' ,')}): the model passes a Python "
                         "value of a type the operator's schema does not take")
            raise ExportFailed(f"torch.onnx.export raised {type(cause).__name__}: {first}") \
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
        _rename_dynamo_nodes(path, axes or {})


def _free(names: list[str], axes: dict[str, dict[int, str]] | None,
          dynamo: bool) -> dict[str, Any]:
    """The free axes as the exporter takes them: TorchScript's dynamic_axes by name; for
    dynamo, torch.export's dynamic shapes, one per positional input of the traced module's
    `forward(*args)` (dynamo cannot map names onto *args)."""
    if not dynamo or not axes:
        return {"dynamic_axes": axes}
    from torch.export import Dim

    return {"dynamic_shapes": (tuple({axis: Dim.DYNAMIC for axis in axes[n]} if n in axes
                                     else None for n in names),)}


def _labelled(graph: onnx.GraphProto, axes: dict[str, dict[int, str]]) -> None:
    """torch.export's symbols (`s50`, `s50 + s81`) on the free axes of the graph's inputs and
    outputs renamed to their labels (`past_sequence_length`), in every shape that has them."""
    ends = {v.name: v for v in [*graph.input, *graph.output]}
    symbols: dict[str, str] = {}
    for name, free in axes.items():
        if name in ends:
            dims = ends[name].type.tensor_type.shape.dim
            for axis, label in free.items():
                if axis < len(dims) and dims[axis].dim_param:
                    symbols.setdefault(dims[axis].dim_param, label)
                    dims[axis].dim_param = label
    for value in [*graph.input, *graph.output, *graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in symbols:
                dim.dim_param = symbols[dim.dim_param]


def _rename_dynamo_nodes(path: Path, axes: dict[str, dict[int, str]]) -> None:
    """Give dynamo-exported nodes TorchScript-style scoped names from their name scopes
    (`['', 'model', 'model.encoder', ..., 'op']`: the deepest module path, then the op), and
    the free axes their labels."""
    model = load(path)
    _labelled(model.graph, axes)
    for i, node in enumerate(model.graph.node):
        raw = {p.key: p.value for p in node.metadata_props}.get("pkg.torch.onnx.name_scopes")
        modules = [s for s in ast.literal_eval(raw)[:-1] if s] if raw else []
        module = modules[-1] if modules else ""
        node.name = "/" + "/".join([*module.split("."), f"{node.op_type}_{i}"]) if module \
            else f"{node.op_type}_{i}"
    save(model, path)
