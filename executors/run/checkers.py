"""Fact checkers: one function per fact (planner.core.ops.FactName) that observes, on a real
artifact, whether the fact holds with a given value.

A checker returns None when the fact holds, else one line saying what breaks it (naming a node
where there is one). The step wrapper (executors/run/wrapper.py) stamps only what a checker observed,
and re-checks an elided step's premises on its real input with the same checkers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executors.onnx.artifacts import (
    MODEL,
    OPSET_RAISED_KEY,
    SIDECAR,
    SOURCE,
    TAG_KEY,
    load,
    model_meta,
)
from planner.core import facts as F
from planner.core.ops import FactName, Op

if TYPE_CHECKING:  # imported where used: a fully cached run never loads onnx (nor numpy)
    import onnx

N = FactName
FLOAT16 = 10  # onnx.TensorProto.FLOAT16 (a stable enum value), without importing onnx


class Artifact:
    """A step's output directory, read lazily: the ONNX graph (weights not loaded), the source
    description, the hierarchy sidecar."""

    def __init__(self, path: Path) -> None:
        self.dir = path

    @property
    def model_path(self) -> Path:
        return self.dir / MODEL

    @cached_property
    def graph(self) -> onnx.ModelProto | None:
        return load(self.model_path, external=False) if self.model_path.is_file() else None

    @cached_property
    def source(self) -> dict[str, Any]:
        path = self.dir / SOURCE
        return json.loads(path.read_text()) if path.is_file() else {}

    def needs_graph(self) -> onnx.ModelProto:
        if self.graph is None:
            raise LookupError(f"{self.dir} holds no {MODEL}")
        return self.graph


Checker = Callable[[Artifact, Any], str | None]


def _format(a: Artifact, want: Any) -> str | None:
    if want == "onnx":
        return None if a.graph is not None else f"no ONNX model in {a.dir}"
    ckpt = a.source.get("checkpoint")
    if want == "torch" and ckpt:
        path = Path(ckpt) if Path(ckpt).is_absolute() else a.dir / ckpt
        return None if (path / "config.json").is_file() else f"no checkpoint at {path}"
    return f"format is not {want}"


def _recorded(field: str) -> Checker:
    """A fact the source step records about the model it resolved."""
    def check(a: Artifact, want: Any) -> str | None:
        have = a.source.get(field)
        return None if have == want else f"the resolved source has {field}={have}"
    return check


def _opset(a: Artifact, want: Any) -> str | None:
    """The configured opset, or the newer one export raised it to for an operator that needs
    it (recorded in the model's metadata, with which operator and why)."""
    model = a.needs_graph()
    have = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    raised = json.loads(model_meta(model).get(OPSET_RAISED_KEY, "{}"))
    if have == want or raised.get("from") == want and raised.get("to") == have:
        return None
    return f"its default-domain opset is {have}"


def _io_specs(a: Artifact, _want: Any) -> str | None:
    model = a.needs_graph()
    raw = model_meta(model).get("winml.io.inputs")
    if raw is None:
        return "no winml.io.inputs metadata"
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = [v.name for v in model.graph.input if v.name not in inits]
    named = [s["name"] for s in json.loads(raw)]
    return None if named == graph_inputs else \
        f"winml.io.inputs names {named}, the graph takes {graph_inputs}"


def _hierarchy_map(a: Artifact, want: Any) -> str | None:
    path = a.dir / SIDECAR
    if not want:  # export.hierarchy=false: a clean export, no hierarchy recorded
        return f"it has a hierarchy sidecar {SIDECAR}" if path.is_file() else None
    if not path.is_file():
        return f"no hierarchy sidecar {SIDECAR}"
    mapped = json.loads(path.read_text())["nodes"]
    missing = [n.name for n in a.needs_graph().graph.node if n.name not in mapped]
    return f"node {missing[0]!r} is not in the sidecar (+{len(missing) - 1} more)" \
        if missing else None


def _normalized(a: Artifact, _want: Any) -> str | None:
    from executors.runtime.ortopt import basic_pass_changes

    a.needs_graph()
    return basic_pass_changes(a.model_path)


def _fused(a: Artifact, want: Any) -> str | None:
    from executors.runtime.ortopt import basic_pass_changes, unfused

    flags = sorted(want)
    if "matmul_add" in flags and (why := basic_pass_changes(a.model_path)):
        return why  # MatMulAddFusion is part of ORT's basic level
    return unfused(a.model_path, flags)


def _legal_for(a: Artifact, want: Any) -> str | None:
    from executors.onnx.legality import violations

    a.needs_graph()
    found = violations(load(a.model_path), want)  # constant values: the weights too
    return f"{found[0]} (+{len(found) - 1} more)" if len(found) > 1 else \
        (found[0] if found else None)


def _tagged(a: Artifact, _want: Any) -> str | None:
    untagged = [n for n in a.needs_graph().graph.node
                if TAG_KEY not in {p.key for p in n.metadata_props}]
    return (f"node {untagged[0].name!r} ({untagged[0].op_type}) has no hierarchy tag"
            + (f" (+{len(untagged) - 1} more)" if len(untagged) > 1 else "")) if untagged else None


def _precision(a: Artifact, want: Any) -> str | None:
    model = a.needs_graph()
    weights, acts = quantized_bits(model)
    if want == "fp16":
        has_fp16 = any(i.data_type == FLOAT16 for i in model.graph.initializer)
        return None if has_fp16 or _casts_to_fp16(model) else "it has no float16 tensor"
    base, _, mixed = str(want).partition("+")  # w8a8+mixed: some modules raised (overrides)
    w, _, act = base.removeprefix("w").partition("a")
    if mixed:
        held = bool(acts) and max(acts) >= int(act) and (not weights or max(weights) >= int(w))
    else:
        held = bool(acts) and max(acts) == int(act) and (not weights or max(weights) == int(w))
    return None if held else f"its weights and activations are {observed_precision(model)}"


def _casts_to_fp16(model: onnx.ModelProto) -> bool:
    return any(n.op_type == "Cast" and any(x.name == "to" and x.i == FLOAT16
                                           for x in n.attribute) for n in model.graph.node)


WEIGHTED = ("MatMul", "Gemm", "Conv", "ConvTranspose")  # ops whose input 1 is a weight


def observed_precision(model: onnx.ModelProto) -> str:
    """w<bits>a<bits> from the Q/DQ nodes (w? when no op has a weight input), fp16 for
    float16 weights, else fp32."""
    weights, acts = quantized_bits(model)
    if acts:
        return f"w{max(weights) if weights else '?'}a{max(acts)}"
    if any(i.data_type == FLOAT16 for i in model.graph.initializer):
        return "fp16"
    return "fp32"


def quantized_bits(model: onnx.ModelProto) -> tuple[list[int], list[int]]:
    """Bit widths of the quantized weights (the DQ feeding the weight input of a MatMul, Gemm or
    Conv) and activations (QuantizeLinear of a computed tensor). Embedding tables and biases
    follow other rules in QNN's QDQ configuration, so they do not count."""
    from onnx import TensorProto

    inits = {i.name: i for i in model.graph.initializer}
    bits = {TensorProto.UINT8: 8, TensorProto.INT8: 8, TensorProto.UINT16: 16,
            TensorProto.INT16: 16, TensorProto.INT4: 4, TensorProto.UINT4: 4}
    weight_inputs = {n.input[1] for n in model.graph.node
                     if n.op_type in WEIGHTED and len(n.input) > 1}
    weights, acts = [], []
    for node in model.graph.node:
        src = node.input[0] if node.input else ""
        if node.op_type == "DequantizeLinear" and src in inits and node.output[0] in weight_inputs:
            weights.append(bits.get(inits[src].data_type, 32))
        elif node.op_type == "QuantizeLinear" and src not in inits and len(node.input) > 2:
            zero_point = inits.get(node.input[2])
            if zero_point is not None:
                acts.append(bits.get(zero_point.data_type, 32))
    return weights, acts


def _compiled(a: Artifact, want: Any) -> str | None:
    from planner.core.targets import named

    provider = named(str(want)).provider  # an EPContext node's source names its EP
    contexts = [n for n in a.needs_graph().graph.node if n.op_type == "EPContext"]
    sources = {attr.s.decode() for n in contexts for attr in n.attribute if attr.name == "source"}
    if not contexts:
        return "it has no EPContext node"
    return None if provider in sources else \
        f"its EPContext nodes come from {sorted(sources)}, not {provider}"


CHECKERS: dict[FactName, Checker] = {
    N.FORMAT: _format, N.SOURCE_DIGEST: _recorded("digest"), N.TASK: _recorded("task"),
    N.MODEL_CLASS: _recorded("model_class"), N.OPSET: _opset, N.IO_SPECS: _io_specs,
    N.HIERARCHY_MAP: _hierarchy_map, N.NORMALIZED: _normalized, N.FUSED: _fused,
    N.LEGAL_FOR: _legal_for, N.TAGGED: _tagged, N.PRECISION: _precision,
    N.COMPILED: _compiled,
}
assert set(CHECKERS) == set(FactName), "every fact needs a checker"


def check(artifact: Artifact, fact: FactName, want: Any) -> str | None:
    try:
        return CHECKERS[fact](artifact, want)
    except LookupError as exc:
        return str(exc)


# Facts an op carries over from its input that are re-observed on its output (the others are
# about provenance, or cost an ORT pass). An EPContext graph hides what it was compiled from,
# so its precision and legality stay the evidence of that graph.
RECHECKED = (N.OPSET, N.IO_SPECS, N.LEGAL_FOR, N.PRECISION, N.TAGGED)
HIDDEN_BY_CONTEXT = (N.LEGAL_FOR, N.PRECISION)


def unmet_carried(carried: F.Facts, artifact: Artifact) -> list[str]:
    """Carried facts that no longer hold on `artifact`, each with what breaks it."""
    graph = artifact.graph
    if graph is None:
        return []
    sealed = any(n.op_type == "EPContext" for n in graph.graph.node)
    out = []
    for fact in RECHECKED:
        if fact in carried and not (sealed and fact in HIDDEN_BY_CONTEXT):
            why = check(artifact, fact, carried[fact].value)
            if why is not None:
                out.append(f"{fact} ({why})")
    return out


def unmet_ensures(op: Op, params: dict[str, Any], artifact: Artifact) -> list[str]:
    """The op's ensured facts that do not hold on `artifact`, each with what breaks it."""
    out = []
    for ensure in op.ensures:
        want = F.resolve_value(ensure.value, params)
        if F.KINDS[ensure.fact] == "set" and not want:
            continue  # an empty set holds on anything
        why = check(artifact, ensure.fact, want)
        if why is not None:
            out.append(f"{F.describe_ensure(ensure, params)} ({why})")
    return out
