"""quantize: QDQ static quantization with ONNX Runtime (the QDQ configuration the target's
profile declares: QNN's for QNN targets), calibrated on real sentences through the model's tokenizer, or on seeded random
values inside each input's range; kind=fp16 converts to float16 instead."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import MODEL, load, save
from executors.run.wrapper import StepContext, StepResult
from executors.samples import Samples, io_specs
from executors.store.weights import THRESHOLD, internalize
from planner.core.targets import of_params

OPSET_16BIT = 21  # QuantizeLinear with 16-bit types


@contextmanager
def quiet_logging() -> Iterator[None]:
    logging.disable(logging.WARNING)  # the quantizer logs a warning per rank-1 weight
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def run(ctx: StepContext) -> StepResult:
    if ctx.params["kind"] == "fp16":
        return _float16(ctx)
    return _qdq(ctx)


def _float16(ctx: StepContext) -> StepResult:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    with quiet_logging():
        model = convert_float_to_float16(load(ctx.input_model()), keep_io_types=True)
        if not _sorted(model):  # it appends the Casts of float32 graph inputs at the end
            OnnxModel(model).topological_sort()
    save(model, ctx.out / MODEL)
    return StepResult(metrics={"precision": "fp16"})


def _sorted(model: Any) -> bool:
    """Every node's inputs are graph inputs, initializers or outputs of earlier nodes."""
    known = {v.name for v in model.graph.input} | {i.name for i in model.graph.initializer} | {""}
    for node in model.graph.node:
        if any(name not in known for name in node.input):
            return False
        known.update(node.output)
    return True


def _qdq(ctx: StepContext) -> StepResult:
    from onnxruntime.quantization import CalibrationDataReader, quantize

    p = ctx.params
    src = ctx.input_model()
    specs, _ = io_specs(src)
    n = p["calibration"]["samples"]
    samples = Samples(specs, "calibration", source=ctx.inputs.get("source"))
    feeds = samples.feeds(n)
    ctx.progress(f"  calibrating on {n} sample(s) ({p['calibration']['method']}): "
                 f"{samples.origin}")
    if samples.random:
        ctx.progress("  warning: calibration: random (the model has no preprocessor for "
                     "some inputs); quantization ranges may not match real data")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self) -> dict[str, Any] | None:
            return next(self.it, None)

    staged = ctx.out / ".float.onnx"  # the quantizer reads a path; keep it inside the build dir
    _stage(src, staged, p)
    with quiet_logging():
        config = _config(p, staged, Reader())
        quantize(str(staged), str(ctx.out / MODEL), config)
    staged.unlink()
    staged.with_name(f"{staged.name}.data").unlink(missing_ok=True)
    model = load(ctx.out / MODEL, external=False)
    save(model, ctx.out / MODEL)  # metadata in canonical order, as every artifact
    qdq = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    return StepResult(metrics={"calibration_samples": n, "qdq_nodes": qdq,
                               "nodes": len(model.graph.node),
                               "calibration": "random" if samples.random else "real",
                               "calibration_data": samples.origin})


def _stage(src: Path, staged: Path, p: dict[str, Any]) -> None:
    """The quantizer's input: a plain copy, weights in one external file (onnx's loader, which
    the quantizer uses, refuses the store's hard-linked blobs; external data has no 2 GB
    limit, and the quantizer then writes its output with external data too). 16-bit types need
    opset 21, which the quantizer would reach by converting the whole model in memory (one
    protobuf: at most 2 GB); the graph alone is converted here instead."""
    import onnx
    from onnx import version_converter

    model = load(src, external=False)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < OPSET_16BIT and "16" in p["activation_type"] + p["weight_type"]:
        model = version_converter.convert_version(model, OPSET_16BIT)
    internalize(model, src.parent)
    onnx.save_model(model, str(staged), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=f"{staged.name}.data",
                    size_threshold=THRESHOLD)


def _config(p: dict[str, Any], path: Path, reader: Any) -> Any:
    from onnxruntime.quantization import CalibrationMethod, QuantType

    qtype = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8, "uint16": QuantType.QUInt16,
             "int16": QuantType.QInt16}
    method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
              "percentile": CalibrationMethod.Percentile}[p["calibration"]["method"]]
    return CONFIGS[of_params(p).qdq.config](p, path, reader, method, qtype[p["activation_type"]],
                       qtype[p["weight_type"]])


def _qnn_config(p: dict[str, Any], path: Path, reader: Any, method: Any, activations: Any,
                weights: Any) -> Any:
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    return get_qnn_qdq_config(
        str(path), reader, calibrate_method=method, activation_type=activations,
        weight_type=weights, per_channel=p["per_channel"], activation_symmetric=p["symmetric"],
        weight_symmetric=p["symmetric"] if p["symmetric"] else None)


def _generic_config(p: dict[str, Any], path: Path, reader: Any, method: Any, activations: Any,
                    weights: Any) -> Any:
    from onnxruntime.quantization import QuantFormat, StaticQuantConfig

    return StaticQuantConfig(
        reader, calibrate_method=method, quant_format=QuantFormat.QDQ,
        activation_type=activations, weight_type=weights, per_channel=p["per_channel"],
        use_external_data_format=True,
        extra_options={"ActivationSymmetric": p["symmetric"], "WeightSymmetric": p["symmetric"]})


# The QDQ configuration builders a target's QdqProfile can name (QNN's knows which ops HTP
# quantizes).
CONFIGS: dict[str, Callable[..., Any]] = {"qnn_qdq_config": _qnn_config,
                                          "static_quant_config": _generic_config}
