"""What the QNN EP's HTP backend takes, as data: the ONNX op types it has a builder for, the
ones it has a builder for but declines or computes wrongly in forms models use (measured), and
what to do about an op legalize leaves.

Source of SUPPORTED: the QNN EP's op builder registrations, onnxruntime's
onnxruntime/core/providers/qnn/builder/op_builder_factory.cc (microsoft/onnxruntime at
00cd7c6df0a6), plus the one-op builders the installed onnxruntime-qnn 2.7.0 (QNN 2.51) has
besides (its libonnxruntime_providers_qnn.so names a Create<Op>OpBuilder for each of
INSTALLED_BUILDERS; com.microsoft's QuickGelu, which ORT's transformer fusion makes of CLIP's
GELU, among them). The EP looks builders up by op type alone, whatever the domain
(com.microsoft's Gelu is Gelu). A builder is no promise that HTP takes every form: compile
still fails, naming the node, on what the backend declines (e.g. a NonZero's dynamic shape).
"""

from __future__ import annotations

SUPPORTED = frozenset({
    # simple element-wise and data-movement builders
    "Add", "Asin", "Atan", "Mul", "Abs", "And", "Ceil", "Cos", "Sign", "Div", "Equal", "Exp",
    "Floor", "Greater", "GreaterOrEqual", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max",
    "Min", "Neg", "Not", "Or", "Pow", "PRelu", "Relu", "Gelu", "Elu", "Round", "Where",
    "ScatterND", "Sigmoid", "Sin", "Sqrt", "Sub", "Sum", "Tanh", "Concat", "QuantizeLinear",
    "DequantizeLinear", "HardSwish", "HardSigmoid", "DepthToSpace", "SpaceToDepth",
    "GridSample", "LpNormalization", "ScatterElements",
    # one builder each (or one per family)
    "Softmax", "LogSoftmax", "Cast",
    "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceL2",
    "Conv", "ConvTranspose",
    "GlobalAveragePool", "AveragePool", "MaxPool", "GlobalMaxPool",
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Gemm", "Gather", "GatherElements",
    "ArgMax", "ArgMin", "Clip", "Slice", "Split", "Resize", "Upsample", "TopK", "Tile",
    "InstanceNormalization", "BatchNormalization", "LayerNormalization", "RMSNormalization",
    "LRN", "Transpose", "Reciprocal", "Pad", "Expand", "Einsum", "MatMul", "Mean", "LSTM",
    "CumSum", "RandomUniformLike", "GatherND", "Mod", "ThresholdedRelu",
    # ONNX Runtime's RMSNorm (its own op in ONNX's domain), built as QNN's RmsNorm: the norms
    # legalize fuses (executors/onnx/rms_norms.py) compile and run on the simulator
    "SimplifiedLayerNormalization",
})

INSTALLED_BUILDERS = frozenset({
    "QuickGelu", "GroupNormalization", "NonZero", "Range", "Shape", "GRU", "OneHot", "IsInf",
    "Selu", "Tan", "RoiAlign", "MaxRoiPool", "LpPool", "NonMaxSuppression", "Bernoulli",
    "RandomNormalLike", "QLinearConv", "QLinearMatMul", "FusedMatMul", "STFT", "Inverse",
    "GatherBlockQuantized", "MatMulNBits", "RotaryEmbedding", "GroupQueryAttention",
    "Attention", "If", "ArrayFeatureExtractor",
})
SUPPORTED = SUPPORTED | INSTALLED_BUILDERS

# Nodes ONNX Runtime removes before any EP sees the graph (constants become initializers,
# its basic level drops identities and inference-mode dropouts).
REMOVED_BY_ORT = frozenset({"Constant", "Identity", "Dropout"})

# Ops with a builder that HTP still declines or gets wrong in forms models use (measured on the
# HTP simulator; legalize lowers each of them, see htp_rewrites.REWRITES).
DECLINED = {
    "Einsum": "the builder takes only a few equations (OWL-ViT's class head was refused)",
    "ReduceL2": "16-bit ReduceL2 feeding a Div fails finalization with MEM_ALLOC",
    "Reciprocal": "16-bit Reciprocal of small inputs is tens of times low (an RMSNorm's rsqrt)",
    "IsNaN": "kept out as before this build had a builder for it: legalize drops the softmax "
             "guard it makes, and nothing else in the models built here needs it",
}

# What to do when an op is left after legalize, by op type.
FIXES = {
    "Erf": "it is not part of a GELU pattern; export the model with a tanh or native GELU",
    "Col2Im": "its shapes are not static; export with fixed shapes",
    "IsNaN": "it does not guard a Where; replace the module that makes it",
}


def lacks(op_type: str) -> bool:
    """Whether HTP would not run a node of this op type after legalize."""
    return op_type in DECLINED or (op_type not in SUPPORTED and op_type not in REMOVED_BY_ORT)


def scope(node_name: str) -> str:
    """The module a TorchScript-style node name belongs to: `/encoder/layer.0/attn/MatMul_1`
    -> `/encoder/layer.0/attn` (the graph's root for a name without one)."""
    head, _, _ = node_name.rpartition("/")
    return head or "/"


def fix(op_type: str) -> str:
    """The fix for an op legalize cannot lower."""
    return FIXES.get(op_type, f"HTP has no {op_type} and legalize has no rewrite for it: "
                              f"replace the module that makes it, or set "
                              f"target.cpu_fallback=true to run it on the CPU")
