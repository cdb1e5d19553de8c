"""Op declarations as data: what each op takes, requires, ensures, is (docs/architecture.md §2).

Rules reason over these declarations only, and executors read them to decide what to check,
publish, report and where a step can run. Behaviour is declared from measurement on ONNX
Runtime 1.32: every ORT graph optimization and `quantize_static` drop all node
metadata_props; legalize and tag keep them.

To add an op: declare it in OPS below and write `executors/steps/<name>.py`; rules and
executors pick it up from the declaration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from planner.core.targets import EP_PACKAGES, of_params


class Trait(StrEnum):
    SOURCE = "source"                            # takes no model input
    IDEMPOTENT = "idempotent"                    # applying it twice equals applying it once
    FOLDS_CONSTANTS = "folds_constants"          # may re-create constants legalize removed
    DROPS_NODE_METADATA = "drops_node_metadata"  # node metadata_props do not survive it
    WRITES_NODE_METADATA = "writes_node_metadata"
    NEEDS_EP = "needs_ep"                        # needs the execution provider its `ep` names
    CHANGES_OPSET = "changes_opset"              # may raise the opset (16-bit Q/DQ: opset 21)
    ENCAPSULATES = "encapsulates"                # wraps the graph in an opaque EP context
    SINK = "sink"                                # produces results, not a model
    NOT_CACHEABLE = "not_cacheable"              # measures this machine: always runs
    CUTS_GRAPH = "cuts_graph"                    # keeps a part of the graph: new inputs, outputs
    HEAVY = "heavy"                              # native runtimes (crashes, memory): a child
    GATE = "gate"                                # failing, it delivers nothing: nothing measured


class FactName(StrEnum):
    """Every fact an op can require or ensure (planner/core/facts.py says how each compares)."""

    FORMAT = "format"
    SOURCE_DIGEST = "source_digest"
    TASK = "task"
    MODEL_CLASS = "model_class"
    OPSET = "opset"
    IO_SPECS = "io_specs"
    HIERARCHY_MAP = "hierarchy_map"
    NORMALIZED = "normalized"
    FUSED = "fused"
    LEGAL_FOR = "legal_for"
    PRECISION = "precision"
    TAGGED = "tagged"
    COMPILED = "compiled"


# The ONNX Runtime fusions optim.flags can name (the config schema's enum is tested against it).
FUSIONS = ("attention", "bias_gelu", "gelu", "layer_norm", "matmul_add", "skip_layer_norm")


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
    fact: FactName
    value: Any = True  # literal, Param or Derived


@dataclass(frozen=True)
class Require:
    """A fact the op's input `role` must carry. test: present | eq | not_in."""

    fact: FactName
    test: str = "present"
    value: Any = None  # literal or Param
    role: str = "model"
    config_path: str = ""
    fix: str = ""
    need: str = ""     # what is required, in words ({param} placeholders are filled in)


@dataclass(frozen=True)
class Memory:
    """How a step's peak memory scales with its graph (planner/core/memory.py adds the runtime's
    own): `weights` times the graph's weights as fp32 bytes, `by_bits` instead at the build's
    weight bits where measured apart, `checkpoint` times the checkpoint as stored (a step that
    loads the torch model), `upcast` times the fp32 weights more when the checkpoint is stored
    in fewer bits (a step that loads it as fp32 holds both while it converts), `narrow` in place
    of `weights` when the checkpoint is stored in fewer bits and the step handles it as stored
    (export traces a bf16 checkpoint in bf16), `layerwise` in place of `weights` when the step
    handles the graph layer by layer (quantize: planner/core/memory.py `layerwise`), each per
    part when `per_part` (a cut graph handled part by part); no checkpoint at all when the step
    has the input `no_checkpoint_with` names.
    Calibrated on this machine (benchmarks/REPORT.md: the llm_bench and scale_bench sections)."""

    weights: float = 0.0
    by_bits: tuple[tuple[int, float], ...] = ()
    checkpoint: float = 0.0
    per_part: bool = False
    upcast: float = 0.0  # more times the fp32 weights when the checkpoint is stored narrower
    narrow: float | None = None  # times the fp32 weights instead, for a narrower checkpoint
    layerwise: float | None = None  # times the fp32 weights instead, when run layer by layer
    # the step's input by whose presence it loads no checkpoint (`checkpoint` and `upcast` then
    # count nothing): lm_bundle scales genai's windowed cache from PyTorch's only without stages
    no_checkpoint_with: str | None = None

    def factor(self, weight_bits: int, as_saved: bool = False) -> float:
        if as_saved and self.narrow is not None:
            return self.narrow
        return dict(self.by_bits).get(weight_bits, self.weights)


@dataclass(frozen=True)
class Op:
    name: str
    version: int
    summary: str                   # one line, shown in plans
    params: tuple[str, ...]        # exactly the keys of a step's params (plan files checked)
    inputs: tuple[str, ...]        # exactly the roles of a step's inputs
    requires: tuple[Require, ...] = ()
    ensures: tuple[Ensure, ...] = ()
    traits: frozenset[Trait] = frozenset()
    tools: tuple[str, ...] = ()
    unkeyed: tuple[str, ...] = ()  # params that locate content but are not content (paths)
    optional: tuple[str, ...] = ()  # params, inputs carried only off their default (keys kept)
    outputs: tuple[str, ...] = ("model",)
    chain_role: str = "model"      # the input a pipeline step is threaded through
    publish: tuple[str, ...] = ()  # outputs copied beside the deliverable (e.g. hierarchy)
    headline: tuple[str, ...] = () # the metrics a run summary shows, most telling first
    gate: str = ""                 # a metric that, when set, says why the run fails (a verdict)
    # Facts the op first establishes on its own input, by the transformation of the op that
    # ensures them (so a step ensuring only these just before it changes nothing it delivers)
    prepares: tuple[Ensure, ...] = ()
    # inputs besides the chain's that it delivers as they are (a bundle's other graphs): a
    # step moved onto their chain is read here too
    delivers: tuple[str, ...] = ()
    memory: Memory = Memory()      # how its peak memory scales with the model
    dropped_by: str = ""           # the override that leaves its steps out of a plan

    def has(self, trait: Trait) -> bool:
        return trait in self.traits

    def tools_for(self, params: dict[str, Any]) -> tuple[str, ...]:
        """The tools a step of this op uses (what its key holds the versions of): the declared
        tools, of which an op that runs on an execution provider keeps only the EP packages
        of the target its params name (a CPU verify does not use onnxruntime-qnn)."""
        if not self.has(Trait.NEEDS_EP):
            return self.tools
        own = of_params(params).session.packages
        return tuple(t for t in self.tools if t not in EP_PACKAGES or t in own)


def bits(dtype: str | None) -> int:
    return {"int4": 4, "uint8": 8, "int8": 8, "uint16": 16, "int16": 16}.get(dtype or "", 32)


def precision(params: dict[str, Any]) -> str:
    if params["kind"] == "fp16":
        return "fp16"
    base = f"w{bits(params['weight_type'])}a{bits(params['activation_type'])}"
    # mixed: modules at other types (overrides, search); the checker asks for the base or more
    return f"{base}+mixed" if params.get("overrides") or params.get("search") else base


def source_format(params: dict[str, Any]) -> str:
    return "onnx" if params["source"] == "onnx_file" else "torch"


T = Trait
N = FactName


def _lm_pair_for_target(what: str) -> tuple[Require, ...]:
    """A causal LM's two graphs, each quantized and legal for the step's target (`what` needs
    them: a step that compiles both)."""
    return tuple(r for role in ("prefill", "decode") for r in (
        Require(N.PRECISION, "not_in", ["fp32"], role=role, config_path="quant",
                fix="set quant=w8a16_pc (or quant=w4a16), or target=cpu",
                need=f"{what} needs quantized graphs"),
        Require(N.LEGAL_FOR, "eq", Param("target"), role=role, config_path="target")))


_GRAPH_REWRITER = frozenset({T.IDEMPOTENT, T.FOLDS_CONSTANTS, T.DROPS_NODE_METADATA, T.HEAVY})

OPS: dict[str, Op] = {op.name: op for op in (
    Op("resolve", 2, "load the model source and digest its files",
       params=("source", "package", "path", "hub_id", "task", "model_class",
               "trust_remote_code", "random_init", "digest"),
       inputs=(),
       ensures=(Ensure(N.FORMAT, Derived("torch, or onnx for an ONNX file", source_format)),
                Ensure(N.SOURCE_DIGEST, Param("digest")), Ensure(N.TASK, Param("task")),
                Ensure(N.MODEL_CLASS, Param("model_class"))),
       traits=frozenset({T.SOURCE, T.HEAVY}),
       tools=("torch", "transformers"), unkeyed=("path",), outputs=("source",), memory=Memory(checkpoint=0.1)),
    Op("export", 10, "export one graph to ONNX and record the module hierarchy",
       params=("exporter", "opset", "graph", "inputs", "outputs", "hierarchy", "report",
               "torch_modules", "dynamic", "upcast", "fallback"), optional=("dynamic", "upcast",
                                                                           "fallback"),
       inputs=("model",),
       requires=(Require(N.FORMAT, "eq", "torch", config_path="model",
                         fix="export needs a torch model; an ONNX file is used as it is"),),
       ensures=(Ensure(N.FORMAT, "onnx"), Ensure(N.OPSET, Param("opset")),
                Ensure(N.IO_SPECS), Ensure(N.HIERARCHY_MAP, Param("hierarchy"))),
       traits=frozenset({T.HEAVY}),
       tools=("torch", "transformers", "onnx"), outputs=("model", "hierarchy"),
       publish=("hierarchy",), headline=("opset_used",),
       memory=Memory(weights=2.0, checkpoint=0.7, narrow=1.3)),
    Op("fix_shapes", 1, "fix the free axes of an exported graph to the target's static "
       "shapes (normalize then folds what became constant): one export for every target",
       params=("inputs",), inputs=("model",),
       requires=(Require(N.FORMAT, "eq", "onnx"),),
       ensures=(Ensure(N.IO_SPECS),),
       tools=("onnx",), memory=Memory(weights=0.7)),
    Op("normalize", 4, "shape inference and ONNX Runtime basic optimizations",
       params=(), inputs=("model",),
       requires=(Require(N.FORMAT, "eq", "onnx"),),
       # measured: ORT's basic level includes MatMulAddFusion
       ensures=(Ensure(N.NORMALIZED), Ensure(N.FUSED, ("matmul_add",))),
       traits=_GRAPH_REWRITER, tools=("onnx", "onnxruntime"), memory=Memory(weights=1.5)),
    Op("optimize", 5, "normalize, ONNX Runtime fusions named by flags, normalize again "
       "(optimize{} is normalize)",
       params=("flags",), inputs=("model",),
       # measured: the fusions need an ONNX graph, nothing more (they infer shapes themselves)
       requires=(Require(N.FORMAT, "eq", "onnx"),),
       ensures=(Ensure(N.NORMALIZED), Ensure(N.FUSED, Param("flags"))),
       prepares=(Ensure(N.NORMALIZED), Ensure(N.FUSED, ("matmul_add",))),
       traits=_GRAPH_REWRITER, tools=("onnx", "onnxruntime"), memory=Memory(weights=1.5)),
    Op("legalize", 12, "rewrite what the target rejects (mask constants and Where, Erf GELU, "
       "RMSNorm fused, Reciprocal, Softplus, outer-product Muls, CumSum, Einsum, Col2Im, GatherND, masked "
       "rows, pooling and Gemm forms, Muls by ones) and check no op outside its table is left",
       params=("target",), inputs=("model",),
       requires=(Require(N.FORMAT, "eq", "onnx"),),
       ensures=(Ensure(N.LEGAL_FOR, Param("target")),),
       traits=frozenset({T.IDEMPOTENT, T.HEAVY}),
       # the graph and its weights once, then one check session at a time (4.0 with two)
       tools=("onnx", "onnxruntime"), memory=Memory(weights=1.8)),
    Op("tag", 2, "write hierarchy tags into every node's metadata",
       params=(), inputs=("model", "hierarchy"),
       requires=(Require(N.FORMAT, "eq", "onnx"), Require(N.HIERARCHY_MAP, role="hierarchy")),
       ensures=(Ensure(N.TAGGED),),
       traits=frozenset({T.IDEMPOTENT, T.WRITES_NODE_METADATA}),
       tools=("onnx",), memory=Memory(weights=1.0)),
    Op("quantize", 4, "QDQ static quantization (or float16 conversion)",
       params=("kind", "weight_type", "activation_type", "per_channel", "symmetric",
               "calibration", "profile", "overrides", "search", "block_size", "layerwise"),
       inputs=("model", "source", "hierarchy"),
       optional=("overrides", "search", "hierarchy", "block_size", "layerwise"),
       # the masked scores' range is what QDQ quantizes: without finite mask constants every
       # real score rounds to one value (measured: MiniLM w8a16_pc on the CPU EP, cosine 0.62)
       requires=(Require(N.NORMALIZED, config_path="optim"),
                 Require(N.LEGAL_FOR, "eq", Param("profile"), config_path="quant")),
       ensures=(Ensure(N.PRECISION, Derived("w<bits>a<bits>[+mixed], or fp16", precision)),),
       traits=frozenset({T.DROPS_NODE_METADATA, T.CHANGES_OPSET, T.HEAVY}),
       # layerwise: a language model's step also holds PyTorch's model for its calibration feeds
       tools=("onnx", "onnxruntime", "transformers"), memory=Memory(weights=3.0, layerwise=1.9)),
    Op("compile", 3, "compile to an EPContext model on the target's execution provider",
       params=("target", "ep", "backend", "embed_context", "cpu_fallback", "provider_options",
               "part"),
       inputs=("model",), optional=("part",),  # part: the one part of a cut graph it compiles
       requires=(Require(N.PRECISION, "not_in", ["fp32"], config_path="quant",
                         fix="set quant=w8a16_pc (or quant=fp16), or target=cpu",
                         need="compile for {target} needs a quantized or fp16 model"),
                 Require(N.LEGAL_FOR, "eq", Param("target"), config_path="target")),
       ensures=(Ensure(N.COMPILED, Param("target")),),
       traits=frozenset({T.NEEDS_EP, T.ENCAPSULATES, T.HEAVY}),
       tools=("onnx", "onnxruntime", "onnxruntime-qnn"),
       memory=Memory(weights=3.3, by_bits=((4, 2.1),), per_part=True)),
    Op("verify", 1, "compare the candidate with the fp32 reference on real inputs",
       params=("metric", "reference", "threshold", "samples", "ep", "backend",
               "provider_options"),
       inputs=("candidate", "reference", "source"),
       requires=(Require(N.FORMAT, "eq", "onnx", role="candidate"),
                 Require(N.FORMAT, "eq", "onnx", role="reference")),
       traits=frozenset({T.SINK, T.NEEDS_EP, T.HEAVY, T.GATE}),
       tools=("onnxruntime", "onnxruntime-qnn", "transformers"),
       outputs=("metrics",), chain_role="candidate", headline=("cosine_mean", "cosine_min"),
       memory=Memory(weights=2.4), dropped_by="verify=none"),
    Op("eval", 2, "the task's metric for PyTorch, the fp32 export and the deliverable on its "
       "target, with a verdict against the largest drop allowed",
       params=("task", "metric", "max_drop", "dataset", "dataset_kind", "dataset_name", "split",
               "samples", "shuffle", "seed", "columns", "columns_checked", "dataset_digest",
               "ep", "backend", "provider_options"),
       optional=("columns_checked",),
       inputs=("candidate", "reference", "source"),
       traits=frozenset({T.SINK, T.NEEDS_EP, T.HEAVY, T.GATE}),
       tools=("torch", "transformers", "onnxruntime", "onnxruntime-qnn", "datasets",
              "scikit-learn", "scipy", "seqeval", "jiwer", "sacrebleu", "faster-coco-eval"),
       unkeyed=("dataset",), outputs=("metrics",), chain_role="candidate",
       headline=("eval_target", "eval_drop", "eval_verdict"), gate="regression",
       memory=Memory(weights=2.4, checkpoint=1.0), dropped_by="eval=none"),
    Op("extract", 1, "cut out the subgraph of each module the name or tag path matches",
       params=("module",), inputs=("model", "hierarchy"),
       requires=(Require(N.FORMAT, "eq", "onnx"),
                 Require(N.TAGGED, config_path="perf.module",
                         fix="perf.module needs a model exported with hierarchy tags"),
                 Require(N.HIERARCHY_MAP, role="hierarchy")),
       traits=frozenset({T.CUTS_GRAPH}),
       tools=("onnx", "onnxruntime"), memory=Memory(weights=1.5)),
    Op("perf", 2, "session time, latency and where the time goes, per module, on the target's "
       "execution provider",
       params=("ep", "backend", "iterations", "warmup", "profile_runs", "provider_options"),
       inputs=("model",),
       requires=(Require(N.FORMAT, "eq", "onnx"),),
       traits=frozenset({T.SINK, T.NEEDS_EP, T.NOT_CACHEABLE, T.HEAVY}),
       tools=("onnxruntime", "onnxruntime-qnn"), outputs=("metrics",),
       headline=("latency_ms_median", "latency_ms_p90", "ep"), memory=Memory(weights=1.5),
       dropped_by="perf=none"),
    Op("bundle", 3, "deliver the graphs of an encoder-decoder model together (a tied head "
       "reads the embedding table)",
       params=("graphs", "ep", "backend", "provider_options"),
       inputs=("encoder", "decoder", "cross", "source"),
       optional=("cross", "source", "ep", "backend", "provider_options"),
       requires=(Require(N.FORMAT, "eq", "onnx", role="encoder"),
                 Require(N.FORMAT, "eq", "onnx", role="decoder")),
       tools=("onnx",), outputs=("models",), chain_role="decoder",
       delivers=("encoder", "cross"), memory=Memory(weights=0.7)),
    Op("lm_bundle", 4, "deliver a causal LM's prefill and decode graphs in one folder, weights "
       "stored once (a tied head reads the embedding table), with its tokenizer, generation "
       "config and genai_config.json (graphs of fixed shapes: genai's windowed uint8 cache "
       "graph over them, scaled from PyTorch's cache on calibration prompts)",
       params=("graphs", "prefill_length", "context_length", "ep", "backend",
               "provider_options"),
       inputs=("prefill", "decode", "source", "shared", "host", "stages"),
       optional=("shared", "host", "stages"),
       requires=(Require(N.FORMAT, "eq", "onnx", role="prefill"),
                 Require(N.FORMAT, "eq", "onnx", role="decode")),
       tools=("onnx", "torch", "transformers"), outputs=("models",), chain_role="decode",
       delivers=("prefill",),
       memory=Memory(weights=0.7, checkpoint=1.0, upcast=1.0, no_checkpoint_with="stages")),
    Op("uncached_bundle", 1, "deliver a causal LM that keeps no key/value cache: its one graph "
       "on the whole prefix per new token, its tokenizer and generation config",
       params=("graphs", "context_length", "ep", "backend", "provider_options"),
       inputs=("uncached", "source"), requires=(Require(N.FORMAT, "eq", "onnx", role="uncached"),),
       tools=("onnx",), outputs=("models",), chain_role="uncached", memory=Memory(weights=0.7)),
    Op("split", 1, "cut a tagged graph into parts by its repeated block (decoder layers), "
       "each part's weights under what one model may hold",
       params=("parts",), inputs=("model",),
       requires=(Require(N.FORMAT, "eq", "onnx"),
                 Require(N.TAGGED, config_path="export.parts",
                         fix="export.parts needs a model exported with hierarchy tags "
                             "(export.hierarchy=true)")),
       traits=frozenset({T.CUTS_GRAPH, T.HEAVY}),
       tools=("onnx", "onnxruntime"), memory=Memory(weights=1.5)),
    Op("host_layers", 1, "export a causal LM's embeddings and/or head (export.on_host) as "
       "small fp32 graphs the host CPU runs beside the target's",
       params=("layers",), inputs=("source",),
       traits=frozenset({T.HEAVY}),
       tools=("torch", "transformers", "onnx"), outputs=("models",), chain_role="source",
       memory=Memory(weights=0.5, checkpoint=1.0)),
    Op("share_context", 1, "compile a causal LM's two graphs into EPContext models sharing "
       "one context binary (the weights once on the device), and try loading it here",
       params=("target", "ep", "backend", "provider_options"), inputs=("prefill", "decode"),
       requires=_lm_pair_for_target("a shared context for {target}"),
       traits=frozenset({T.NEEDS_EP, T.HEAVY}),
       tools=("onnx", "onnxruntime", "onnxruntime-qnn"), outputs=("models",),
       chain_role="decode", delivers=("prefill",),
       memory=Memory(weights=3.3, by_bits=((4, 2.9),))),
    Op("genai_stages", 1, "wrap a causal LM's two quantized graphs as onnxruntime-genai's "
       "decoder-pipeline stages over fixed key/value buffers (positions and mask from genai's "
       "past_seq_len, new entries written into the buffers) and compile each",
       params=("target", "window", "ep", "backend", "provider_options"),
       inputs=("prefill", "decode"),
       requires=_lm_pair_for_target("genai's stages for {target}"),
       traits=frozenset({T.NEEDS_EP, T.HEAVY}),
       tools=("onnx", "onnxruntime", "onnxruntime-qnn"), outputs=("models",),
       chain_role="decode", delivers=("prefill",),
       memory=Memory(weights=1.8)),
    Op("verify_generation", 2, "the deliverable's greedy generation against PyTorch's on real "
       "prompts: token agreement, first divergence, logits cosine per step (and of its "
       "onnxruntime-genai stages where it has them)",
       params=("prompts", "new_tokens", "threshold", "ep", "backend", "provider_options"),
       inputs=("candidate", "source"),
       traits=frozenset({T.SINK, T.NEEDS_EP, T.HEAVY}),
       tools=("torch", "transformers", "onnxruntime", "onnxruntime-qnn"),
       outputs=("metrics",), chain_role="candidate",
       headline=("token_agreement", "first_divergence", "cosine_mean"),
       memory=Memory(weights=2.6), dropped_by="verify=none"),
    Op("generate_loop", 1, "export an encoder-decoder's greedy decoding as one ONNX graph (the "
       "decoder in a Loop) and open it through the session cache, cold and warm",
       params=("encoder_inputs", "decoder_length", "start", "pad", "masked", "opset"),
       inputs=("model",),
       requires=(Require(N.FORMAT, "eq", "torch", config_path="model",
                         fix="the loop is exported from the torch model"),),
       traits=frozenset({T.SINK, T.HEAVY}),
       tools=("torch", "transformers", "onnx", "onnxruntime"), outputs=("loop",),
       publish=("loop",), headline=("cache_warm", "session_warm_s"),
       memory=Memory(weights=1.0, checkpoint=1.0)),
)}
