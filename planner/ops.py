"""Op declarations: what each op takes, requires, ensures and is (DESIGN §2), as data.

Rules reason over these declarations only. Behaviour is declared from measurement on
ONNX Runtime 1.32: every ORT graph optimization and `quantize_static` drop all node
metadata_props; legalize and tag keep them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Trait(StrEnum):
    SOURCE = "source"                            # takes no model input
    DETERMINISTIC = "deterministic"              # same inputs and params, same bytes
    CHEAP = "cheap"
    IDEMPOTENT = "idempotent"                    # applying it twice equals applying it once
    REWRITES_GRAPH = "rewrites_graph"
    FOLDS_CONSTANTS = "folds_constants"          # may re-create constants legalize removed
    DROPS_NODE_METADATA = "drops_node_metadata"  # node metadata_props do not survive it
    WRITES_NODE_METADATA = "writes_node_metadata"
    CALIBRATES = "calibrates"                    # its result depends on value ranges
    NEEDS_EP = "needs_ep"                        # needs an ONNX Runtime execution provider
    ENCAPSULATES = "encapsulates"                # wraps the graph in an opaque EP context
    SINK = "sink"                                # produces results, not a model
    NOT_CACHEABLE = "not_cacheable"              # measures this machine: always runs


@dataclass(frozen=True)
class Param:
    """A fact value taken from the step's parameter `name`."""

    name: str


@dataclass(frozen=True)
class Derived:
    """A fact value computed from the step's params by a pure function."""

    describe: str
    fn: Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Ensure:
    fact: str
    value: Any = True  # literal, Param or Derived


@dataclass(frozen=True)
class Require:
    """A fact the op's input `role` must carry. test: present | eq | not_in."""

    fact: str
    test: str = "present"
    value: Any = None  # literal or Param
    role: str = "model"
    config_path: str = ""
    fix: str = ""
    need: str = ""     # what is required, in words ({param} placeholders are filled in)


@dataclass(frozen=True)
class Op:
    name: str
    version: int
    summary: str
    params: tuple[str, ...]
    inputs: tuple[str, ...]
    requires: tuple[Require, ...] = ()
    ensures: tuple[Ensure, ...] = ()
    traits: frozenset[Trait] = frozenset()
    tools: tuple[str, ...] = ()
    unkeyed: tuple[str, ...] = ()  # params that locate content but are not content (paths)
    outputs: tuple[str, ...] = ("model",)
    chain_role: str = "model"      # the input a pipeline step is threaded through

    def has(self, trait: Trait) -> bool:
        return trait in self.traits


def bits(dtype: str | None) -> int:
    return {"uint8": 8, "int8": 8, "uint16": 16, "int16": 16}.get(dtype or "", 32)


def precision(params: dict[str, Any]) -> str:
    if params["kind"] == "fp16":
        return "fp16"
    return f"w{bits(params['weight_type'])}a{bits(params['activation_type'])}"


def source_format(params: dict[str, Any]) -> str:
    return "onnx" if params["source"] == "onnx_file" else "torch"


T = Trait
_GRAPH_REWRITER = frozenset({T.DETERMINISTIC, T.IDEMPOTENT, T.REWRITES_GRAPH,
                             T.FOLDS_CONSTANTS, T.DROPS_NODE_METADATA})

OPS: dict[str, Op] = {op.name: op for op in (
    Op("resolve", 2, "load the model source and digest its files",
       params=("source", "package", "path", "hub_id", "task", "model_class",
               "trust_remote_code", "random_init", "digest"),
       inputs=(),
       ensures=(Ensure("format", Derived("torch, or onnx for an ONNX file", source_format)),
                Ensure("source_digest", Param("digest")), Ensure("task", Param("task")),
                Ensure("model_class", Param("model_class"))),
       traits=frozenset({T.SOURCE, T.DETERMINISTIC, T.CHEAP}),
       tools=("torch", "transformers"), unkeyed=("path",), outputs=("source",)),
    Op("export", 3, "export to ONNX and record the module hierarchy",
       params=("exporter", "opset", "inputs", "report"),
       inputs=("model",),
       requires=(Require("format", "eq", "torch", config_path="model",
                         fix="export needs a torch model; an ONNX file is used as it is"),),
       ensures=(Ensure("format", "onnx"), Ensure("opset", Param("opset")),
                Ensure("io_specs"), Ensure("hierarchy_map")),
       traits=frozenset({T.DETERMINISTIC}),
       tools=("torch", "transformers", "onnx"), outputs=("model", "hierarchy")),
    Op("normalize", 2, "shape inference and ONNX Runtime basic optimizations",
       params=(), inputs=("model",),
       requires=(Require("format", "eq", "onnx"),),
       # measured: ORT's basic level includes MatMulAddFusion
       ensures=(Ensure("normalized"), Ensure("fused", ("matmul_add",))),
       traits=_GRAPH_REWRITER, tools=("onnx", "onnxruntime")),
    Op("optimize", 3, "ONNX Runtime fusions named by flags (optimize{} is normalize)",
       params=("flags",), inputs=("model",),
       requires=(Require("normalized", config_path="optim"),),
       ensures=(Ensure("normalized"), Ensure("fused", Param("flags"))),
       traits=_GRAPH_REWRITER, tools=("onnx", "onnxruntime")),
    Op("legalize", 3, "rewrite what the target rejects (mask constants, mask Where, Erf GELU)",
       params=("target",), inputs=("model",),
       requires=(Require("format", "eq", "onnx"),),
       ensures=(Ensure("legal_for", Param("target")),),
       traits=frozenset({T.DETERMINISTIC, T.IDEMPOTENT, T.REWRITES_GRAPH}),
       tools=("onnx", "onnxruntime")),
    Op("tag", 2, "write hierarchy tags into every node's metadata",
       params=(), inputs=("model", "hierarchy"),
       requires=(Require("format", "eq", "onnx"), Require("hierarchy_map", role="hierarchy")),
       ensures=(Ensure("tagged"),),
       traits=frozenset({T.DETERMINISTIC, T.IDEMPOTENT, T.WRITES_NODE_METADATA}),
       tools=("onnx",)),
    Op("quantize", 2, "QDQ static quantization (or float16 conversion)",
       params=("kind", "weight_type", "activation_type", "per_channel", "symmetric",
               "calibration", "profile"),
       inputs=("model", "source"),
       requires=(Require("normalized", config_path="optim"),),
       ensures=(Ensure("precision", Derived("w<bits>a<bits>, or fp16", precision)),),
       traits=frozenset({T.DETERMINISTIC, T.REWRITES_GRAPH, T.CALIBRATES,
                         T.DROPS_NODE_METADATA}),
       tools=("onnx", "onnxruntime", "transformers")),
    Op("compile", 2, "compile to an EPContext model on the target's execution provider",
       params=("target", "ep", "backend", "embed_context", "cpu_fallback", "provider_options"),
       inputs=("model",),
       requires=(Require("precision", "not_in", ["fp32"], config_path="quant",
                         fix="set quant=w8a16_pc (or quant=fp16), or target=cpu",
                         need="compile for {target} needs a quantized or fp16 model"),
                 Require("legal_for", "eq", Param("target"), config_path="target")),
       ensures=(Ensure("compiled", Param("target")),),
       traits=frozenset({T.NEEDS_EP, T.ENCAPSULATES}),
       tools=("onnx", "onnxruntime", "onnxruntime-qnn")),
    Op("verify", 1, "compare the candidate with the fp32 reference on real inputs",
       params=("metric", "reference", "threshold", "samples", "ep", "backend",
               "provider_options"),
       inputs=("candidate", "reference", "source"),
       requires=(Require("format", "eq", "onnx", role="candidate"),
                 Require("format", "eq", "onnx", role="reference")),
       traits=frozenset({T.SINK, T.NEEDS_EP, T.DETERMINISTIC}),
       tools=("onnxruntime", "onnxruntime-qnn", "transformers"),
       outputs=("metrics",), chain_role="candidate"),
    Op("perf", 1, "session time and latency on the target's execution provider",
       params=("ep", "backend", "iterations", "warmup", "provider_options"),
       inputs=("model",),
       requires=(Require("format", "eq", "onnx"),),
       traits=frozenset({T.SINK, T.NEEDS_EP, T.NOT_CACHEABLE}),
       tools=("onnxruntime", "onnxruntime-qnn"), outputs=("metrics",)),
)}



