"""quantize: QDQ static quantization with ONNX Runtime (its QNN QDQ configuration for QNN
targets), calibrated on real sentences through the model's tokenizer, or on seeded random
values inside each input's range; kind=fp16 converts to float16 instead."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from executors.artifacts import load, save, stamp_facts
from executors.base import MODEL, StepContext, StepResult
from executors.inputs import batches, io_specs


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

    with quiet_logging():
        model = convert_float_to_float16(load(ctx.input_model()), keep_io_types=True)
    stamp_facts(model, ctx.facts, ctx.id, ctx.step["key"])
    save(model, ctx.out / MODEL)
    return StepResult(metrics={"precision": "fp16"})


def _qdq(ctx: StepContext) -> StepResult:
    from onnxruntime.quantization import CalibrationDataReader, quantize

    p = ctx.params
    src = ctx.input_model()
    specs, _ = io_specs(src)
    n = p["calibration"]["samples"]
    ctx.progress(f"  calibrating on {n} sample(s) ({p['calibration']['method']})")
    feeds = batches(specs, n, "calibration", source=ctx.inputs.get("source"))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self) -> dict[str, Any] | None:
            return next(self.it, None)

    staged = ctx.out / ".float.onnx"  # the quantizer reads a path; keep it inside the build dir
    save(load(src), staged)
    with quiet_logging():
        config = _config(p, staged, Reader())
        quantize(str(staged), str(ctx.out / MODEL), config)
    staged.unlink()
    model = load(ctx.out / MODEL)
    stamp_facts(model, ctx.facts, ctx.id, ctx.step["key"])
    save(model, ctx.out / MODEL)
    qdq = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    return StepResult(metrics={"calibration_samples": n, "qdq_nodes": qdq,
                               "nodes": len(model.graph.node)})


def _config(p: dict[str, Any], path: Path, reader: Any) -> Any:
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        StaticQuantConfig,
    )

    qtype = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8, "uint16": QuantType.QUInt16,
             "int16": QuantType.QInt16}
    method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
              "percentile": CalibrationMethod.Percentile}[p["calibration"]["method"]]
    if p["profile"].startswith("qnn"):
        from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

        return get_qnn_qdq_config(
            str(path), reader, calibrate_method=method,
            activation_type=qtype[p["activation_type"]], weight_type=qtype[p["weight_type"]],
            per_channel=p["per_channel"], activation_symmetric=p["symmetric"],
            weight_symmetric=p["symmetric"] if p["symmetric"] else None)
    return StaticQuantConfig(
        reader, calibrate_method=method, quant_format=QuantFormat.QDQ,
        activation_type=qtype[p["activation_type"]], weight_type=qtype[p["weight_type"]],
        per_channel=p["per_channel"],
        extra_options={"ActivationSymmetric": p["symmetric"], "WeightSymmetric": p["symmetric"]})
