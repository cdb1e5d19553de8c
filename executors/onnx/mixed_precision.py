"""Mixed precision by module: turn `quant.overrides` rules into what ONNX Runtime's quantizer
takes (tensor quant overrides for activations and weights, nodes to exclude for float), and
count what the quantized graph really carries.

Nodes are selected on the quantize step's input, which has no tags: each node's module comes
from the export's hierarchy sidecar by node name (as the tag step assigns it after quantize).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import onnx

from executors.onnx import four_bit
from executors.onnx.hierarchy import prefixes
from executors.onnx.subgraph import class_of, matches, under

BIAS = {"Gemm": 2, "Conv": 2, "ConvTranspose": 2}  # quantized as int32 from its weights: not set
FLOAT = "float"


class SelectionError(ValueError):
    """A rule selects no node: the message names the rule and what the graph has."""


@dataclass
class Settings:
    """What the rules decided for the graph."""

    nodes: dict[str, dict[str, str]] = field(default_factory=dict)  # node name -> its settings
    selected: list[int] = field(default_factory=list)               # nodes each rule selected

    def float_nodes(self) -> list[str]:
        return sorted(n for n, s in self.nodes.items() if s.get("precision") == FLOAT)


def select(rule: dict[str, Any], graph: onnx.GraphProto, tags: list[str]) -> list[str]:
    """The names of the nodes a rule selects (every selector it gives must hold)."""
    chosen = set(range(len(graph.node)))
    if rule.get("modules"):
        paths = [p for t in set(tags) if t for p in prefixes(t)]
        wanted = [p for spec in rule["modules"] for p in matches(spec, paths)]
        chosen &= {i for i, t in enumerate(tags) if any(under(t, p) for p in wanted)}
    if rule.get("op_types"):
        chosen &= {i for i, n in enumerate(graph.node) if n.op_type in rule["op_types"]}
    if rule.get("except_op_types"):
        chosen &= {i for i, n in enumerate(graph.node) if n.op_type not in rule["except_op_types"]}
    if rule.get("nodes"):
        chosen &= {i for i, n in enumerate(graph.node) if n.name in rule["nodes"]}
    return [graph.node[i].name for i in sorted(chosen)]


def decide(rules: list[dict[str, Any]], graph: onnx.GraphProto, tags: list[str]) -> Settings:
    """Each selected node's settings, later rules winning; a rule that selects nothing is an
    error naming it and the module classes the graph has."""
    out = Settings()
    for i, rule in enumerate(rules):
        names = select(rule, graph, tags)
        if not names:
            raise SelectionError(f"quant.overrides.{i} {_selectors(rule)} selects no node of "
                                 f"this graph ({_known(graph, tags)})")
        out.selected.append(len(names))
        for name in names:
            if rule.get("precision") == FLOAT:
                out.nodes[name] = {"precision": FLOAT}
                continue
            now = {k: v for k, v in out.nodes.get(name, {}).items() if k != "precision"}
            now |= {k: rule[k] for k in ("weight_type", "activation_type") if k in rule}
            out.nodes[name] = now
    return out


def _selectors(rule: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in rule.items() if k in ("modules", "op_types", "except_op_types", "nodes"))


def _known(graph: onnx.GraphProto, tags: list[str]) -> str:
    classes = sorted({class_of(p) for t in tags if t for p in prefixes(t)})
    ops = sorted({n.op_type for n in graph.node})
    return (f"module classes: {', '.join(classes[:8]) or 'none (no tags)'}"
            f"{', ...' if len(classes) > 8 else ''}; op types: {', '.join(ops[:10])}"
            f"{', ...' if len(ops) > 10 else ''}")


def tensor_overrides(settings: Settings, model: onnx.ModelProto,
                     qtype: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """ORT's TensorQuantOverrides: a selected node's float outputs at its activation type, its
    float weights (initializers, biases aside) at its weight type."""
    inits = {i.name: i for i in model.graph.initializer}
    floats = _float_tensors(model)
    out: dict[str, list[dict[str, Any]]] = {}
    for node in model.graph.node:
        s = settings.nodes.get(node.name, {})
        if "activation_type" in s:
            for name in node.output:
                if name in floats and name not in inits:
                    out[name] = [{"quant_type": qtype[s["activation_type"]]}]
        if "weight_type" in s:
            for k, name in enumerate(node.input):
                if name in inits and k != BIAS.get(node.op_type) and \
                        inits[name].data_type == onnx.TensorProto.FLOAT:
                    out[name] = [{"quant_type": qtype[s["weight_type"]]}]
    return out


def _float_tensors(model: onnx.ModelProto) -> set[str]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    g = inferred.graph
    return {v.name for v in [*g.value_info, *g.output, *g.input]
            if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}


def types_used(model: onnx.ModelProto, default: dict[str, str],
               float_nodes: list[str]) -> dict[str, int]:
    """What the quantized graph carries besides the defaults: quantized activations (Q nodes)
    and weights (quantized initializers) per type, and how many of `float_nodes` stayed float
    (no output quantized)."""
    names = {onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT8: "int8",
             onnx.TensorProto.UINT16: "uint16", onnx.TensorProto.INT16: "int16",
             onnx.TensorProto.INT32: "int32", onnx.TensorProto.INT4: "int4"}
    inits = {i.name: i for i in model.graph.initializer}
    counts: Counter[str] = Counter()
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and len(node.input) > 2 and node.input[2] in inits:
            kind = "weight" if node.input[0] in inits else "activation"
            counts[f"{kind} {names.get(inits[node.input[2]].data_type, '?')}"] += 1
        elif node.op_type == "DequantizeLinear" and node.input[0] in inits:
            counts[f"weight {names.get(inits[node.input[0]].data_type, '?')}"] += 1
    wanted = set(float_nodes)
    made_by_dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    readers: dict[str, set[str]] = {}
    for n in model.graph.node:
        for name in n.input:
            readers.setdefault(name, set()).add(n.op_type)
    stayed = sum(1 for n in model.graph.node
                 if n.name in wanted and not _qdq_unit(n, made_by_dq, readers))
    usual = {f"activation {default['activation_type']}", f"weight {default['weight_type']}",
             f"weight {four_bit.default_weight_type(default)}",  # norms of a 4-bit precision
             "weight int32"}  # biases are int32 at every precision
    out = {k: v for k, v in sorted(counts.items()) if k not in usual}
    return out | ({"float nodes": stayed} if float_nodes else {})


def _qdq_unit(node: onnx.NodeProto, made_by_dq: set[str], readers: dict[str, set[str]]) -> bool:
    """Whether a node reads only dequantized tensors and every reader of its outputs quantizes
    them: a node a QDQ backend runs quantized, whatever the quantizer was told."""
    return all(x in made_by_dq for x in node.input if x) and all(
        readers.get(o) == {"QuantizeLinear"} for o in node.output if o)
