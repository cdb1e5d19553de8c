"""What the winml-cli build recipe format says, as data: its execution-provider folders, the
optimization capabilities it knows, its own model classes and graph wrappers, and how each of
these meets modelplan (facts read from microsoft/winml-cli, MIT licensed)."""

from __future__ import annotations

from dataclasses import dataclass

# Recipe sections of a WinMLBuildConfig; anything else at the top is not read by winml-cli.
SECTIONS = ("loader", "export", "optim", "quant", "compile", "eval")
TOP_LEVEL = (*SECTIONS, "auto", "skip_optimize")

# Precisions in recipe file names (`<task>_<precision>_config[_<role>].json`).
PRECISIONS = ("fp16", "fp32", "w8a16", "w8a8")


@dataclass(frozen=True)
class Target:
    """What a recipe's `<ep>/<device>` folder (or compile.ep_config.provider) means here."""

    name: str                  # as the recipe says it: qnn/npu
    modelplan: str | None      # the modelplan target option, or None when unsupported
    why: str = ""              # why it is unsupported


# Execution providers winml-cli targets, by folder alias, and the devices each runs on.
EP_NAMES = {
    "cpu": "the CPU execution provider (MLAS)", "qnn": "Qualcomm QNN",
    "dml": "DirectML", "openvino": "OpenVINO", "vitisai": "AMD Vitis AI",
    "nvtensorrtrtx": "NVIDIA TensorRT RTX", "nv_tensorrt_rtx": "NVIDIA TensorRT RTX",
    "cuda": "CUDA", "migraphx": "AMD MIGraphX", "tensorrt": "TensorRT",
}
EP_FULL_NAMES = {
    "CPUExecutionProvider": "cpu", "QNNExecutionProvider": "qnn", "DmlExecutionProvider": "dml",
    "OpenVINOExecutionProvider": "openvino", "VitisAIExecutionProvider": "vitisai",
    "NvTensorRTRTXExecutionProvider": "nvtensorrtrtx", "CUDAExecutionProvider": "cuda",
    "MIGraphXExecutionProvider": "migraphx", "TensorrtExecutionProvider": "tensorrt",
}
DEVICES = ("cpu", "gpu", "npu")
MODELPLAN_TARGETS = {("cpu", "cpu"): "cpu", ("qnn", "npu"): "qnn_htp"}


def target(ep: str, device: str | None) -> Target:
    """The modelplan target for a winml-cli EP and device (device None: the EP's usual)."""
    ep = EP_FULL_NAMES.get(ep, ep).lower()
    device = (device or {"cpu": "cpu", "qnn": "npu"}.get(ep, "")).lower()
    name = f"{ep}/{device}" if device else ep
    found = MODELPLAN_TARGETS.get((ep, device))
    if found:
        return Target(name, found)
    what = EP_NAMES.get(ep, f"execution provider {ep!r}")
    if ep == "qnn":
        why = f"QNN's {device or 'unnamed'} backend is not one modelplan builds for (it builds " \
              "for the HTP, the NPU)"
    else:
        why = f"{what} is not a target modelplan builds for"
    return Target(name, None, why)


# Optimization capabilities winml-cli knows (its optim registry, snake_case as recipes write
# them); a recipe key outside this set is ignored by winml-cli itself.
CAPABILITIES = frozenset({
    "bias_softmax_fusion", "bias_dropout_fusion", "static_split_to_slice",
    "conv_channel_affine_folding", "exp_positive_scale_folding", "attention_fusion",
    "conv_add_fusion", "conv_bn_fusion", "conv_mul_fusion", "conv_activation_fusion",
    "slice_elimination", "expand_elimination", "unsqueeze_elimination", "gelu_fusion",
    "fast_gelu_fusion", "bias_gelu_fusion", "quick_gelu_fusion", "gelu_approximation",
    "gemm_activation_fusion", "gemm_sum_fusion", "gemm_transpose_fusion",
    "concat_slice_elimination", "double_qdq_pairs_remover", "constant_folding",
    "layer_norm_fusion", "skip_layer_norm_fusion", "simplified_layer_norm_fusion",
    "embed_layer_norm_fusion", "bias_skip_layer_norm_fusion", "fuse_rmsnorm",
    "transpose_optimizer", "nhwc_transformer", "nchwc_transformer",
    "conv_add_activation_fusion", "matmul_add_fusion", "matmul_activation_fusion",
    "matmul_transpose_fusion", "matmul_scale_fusion", "matmul_bn_fusion",
    "dynamic_quantize_matmul_fusion", "gather_slice_to_split_fusion", "gather_to_slice_fusion",
    "pad_fusion", "not_where_fusion", "clamp_constant_values",
    "remove_isnan_in_attention_mask", "untie_constant_batched_matmul",
})

# winml-cli capabilities that are modelplan's legalize rewrites (executors/onnx/htp_rewrites.py).
LEGALIZE = {
    "clamp_constant_values": "floors -inf/float-min mask constants (to -100)",
    "remove_isnan_in_attention_mask": "drops the IsNaN guards of attention masks",
}

# winml-cli's graph wrappers: which graph of an encoder-decoder model a recipe exports.
WRAPPER_ROLES = {
    "MarianEncoderWrapper": "encoder", "MarianDecoderWrapper": "decoder",
    "VisionEncoderWrapper": "encoder", "VisionDecoderWrapper": "decoder",
}



def wrapper_role(cls: str) -> str | None:
    """The graph a winml-cli wrapper class exports: the listed ones, and by its name's end
    any other (`BlipVisionEncoderWrapper`, `BlipTextDecoderWrapper`)."""
    if cls in WRAPPER_ROLES:
        return WRAPPER_ROLES[cls]
    for role in ("encoder", "decoder"):
        if cls.endswith(f"{role.capitalize()}Wrapper"):
            return role
    return None


# Model types as winml-cli names them -> (the checkpoint's model type, the tower).
TYPE_ALIASES = {
    "clip_text_model": ("clip", "text tower"),
    "clip_vision_model": ("clip", "vision tower"),
}

# winml-cli's own models: no transformers class loads them as the recipe exports them.
OWN_MODELS = {
    "wav2vec2_emotion_regression": "winml-cli's own EmotionModel (wav2vec2 with a mean-pooled "
                                   "regression head), which transformers does not have",
    "unlimited-ocr": "a remote-code OCR model of which winml-cli exports its own vision-tower "
                     "wrapper (SAM -> CLIP -> projector), which transformers does not have",
}
OWN_CLASSES = {"EmotionModel": OWN_MODELS["wav2vec2_emotion_regression"]}

# Quantization modes: winml-cli reads "qdq" as "static".
QUANT_MODES = {"static": "qdq", "qdq": "qdq", "fp16": "fp16"}
UNSUPPORTED_QUANT = {
    "dynamic": "dynamic quantization (activations quantized at run time) is not a mode "
               "modelplan builds; it builds static QDQ and fp16",
    "rtn": "round-to-nearest weight-only quantization is not a mode modelplan builds; it "
           "builds static QDQ and fp16",
}
