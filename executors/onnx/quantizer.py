"""QDQ static quantization with ONNX Runtime: the QDQ configuration the target's profile declares
(QNN's for QNN targets), with the mixed-precision rules of `quant.overrides` applied as tensor
quant overrides and nodes to exclude. For QNN, its configuration adds type conversions where a
tensor of one type feeds a node of another (HTP ops want one type in and out); for the CPU a
tensor keeps the one type its producer has, and every reader reads it at that type. One staged float model can be quantized several times
(the repair search does)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from executors.onnx import four_bit, headroom, htp_encodings, layerwise
from executors.onnx import mixed_precision as mp
from executors.onnx.artifacts import SIDECAR, load, save
from executors.store.weights import gather
from planner.core.targets import of_params

OPSET_16BIT = 21  # QuantizeLinear with 16-bit types


@contextmanager
def quiet_logging() -> Iterator[None]:
    import onnxruntime as ort

    logging.disable(logging.WARNING)  # the quantizer logs a warning per rank-1 weight
    ort.set_default_logger_severity(3)  # and its calibration sessions, per unused constant
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
        ort.set_default_logger_severity(2)


@dataclass
class Staged:
    """The quantizer's float input, its calibration feeds and each node's module tag."""

    path: Path
    params: dict[str, Any]
    feeds: list[dict[str, Any]]
    tags: list[str]
    layers: layerwise.Layers | None = None  # quantized layer by layer (executors/onnx/layerwise.py)
    whole: str | None = None  # why a graph that qualifies is quantized whole


def stage(src: Path, staged: Path, p: dict[str, Any], feeds: list[dict[str, Any]],
          hierarchy: Path | None, wide: bool = False, pieces: str = "never") -> Staged:
    """The quantizer's input: a plain copy, weights in one external file copied in chunks, never
    all in memory (onnx's loader, which the quantizer uses, refuses the store's hard-linked blobs; external data has no 2 GB
    limit, and the quantizer then writes its output with external data too). 16-bit types need
    opset 21, which the quantizer would reach by converting the whole model in memory (one
    protobuf: at most 2 GB); the graph alone is converted here instead (wide: whether a 16-bit
    type may come later, as in the search). Tags: the export's hierarchy by node name.
    `pieces`: quant.layerwise (auto, always, never): whether it is quantized layer by layer."""
    from onnx import version_converter

    from executors.onnx import hierarchy as H
    from executors.onnx import rms_norms

    rms_norms.register()  # ONNX Runtime's op, which HTP's legalize fuses: converted as it is
    model = load(src, external=False)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    types = [p["activation_type"], p["weight_type"],
             *(r.get(k, "") for r in p.get("overrides", []) for k in r)]
    if opset < OPSET_16BIT and (wide or any(str(t).endswith(("16", "4")) for t in types)):
        model = version_converter.convert_version(model, OPSET_16BIT)
    tags = [""] * len(model.graph.node)
    if hierarchy is not None:
        meta = json.loads((hierarchy / SIDECAR).read_text())
        tags = [t for t, _how in H.assign(model.graph, meta)]
    gather(model, src.parent, staged.with_name(f"{staged.name}.data"))
    onnx.save_model(model, str(staged))
    try:
        return Staged(staged, p, feeds, tags, layerwise.cut(model, tags, pieces))
    except layerwise.Unstitched as exc:
        return Staged(staged, p, feeds, tags, whole=str(exc))


def unstage(staged: Staged) -> None:
    staged.path.unlink()
    staged.path.with_name(f"{staged.path.name}.data").unlink(missing_ok=True)
    for cache in staged.path.parent.glob(f"{staged.path.name}.ranges-*.json"):
        cache.unlink()


def quantize_to(staged: Staged, rules: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """Quantize the staged model into `out` under `rules`; what the output carries besides the
    defaults. Raises mp.SelectionError when a rule selects no node."""
    graph_only = onnx.load(str(staged.path), load_external_data=False)
    settings = mp.decide(rules, graph_only.graph, staged.tags)
    qtype = _qtypes()
    four = four_bit.overrides(staged.params, graph_only, qtype)
    overrides = {**four, **(mp.tensor_overrides(settings, graph_only, qtype) if rules else {})}
    p = staged.params
    how: dict[str, Any] = {"layerwise": {"whole": staged.whole}} if staged.whole else {}
    with quiet_logging():
        config = _config(p, staged.path, layerwise.FeedReader(staged.feeds), overrides,
                         settings.float_nodes(), qtype)
        if staged.layers is not None:
            try:
                model, blocked = _by_layers(staged, config, _unshared(graph_only, config), four,
                                            out)
                how = {"layerwise": {"pieces": len(staged.layers.pieces),
                                     "block": staged.layers.block}}
            except layerwise.Unstitched as exc:
                how = {"layerwise": {"whole": str(exc)}}
                staged.layers, staged.whole = None, str(exc)
        if staged.layers is None:
            _quantize(staged.path, out, config, _ranges(staged, config, graph_only))
            model = load(out, external=False)
            blocked = four_bit.to_blocks(model, graph_only, staged.path.parent, p, four) \
                if four else 0
            save(model, out)  # metadata in canonical order, as every artifact
        shared = {"gathers": htp_encodings.gathers_share_encodings(model),
                  "concats": htp_encodings.concats_share_encodings(model)} \
            if of_params(p).qdq.config == "qnn_qdq_config" else {}
        if any(shared.values()):
            save(model, out)
    qdq = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    found = {"qdq_nodes": qdq, "nodes": len(model.graph.node), **how,
             **({"encodings_shared": shared} if any(shared.values()) else {}),
             **({"weights_4bit": len(four)} if four else {}),
             **({"weights_blocked": blocked} if blocked else {})}
    if rules:
        found["overridden"] = mp.types_used(model, p, settings.float_nodes())
        found["selected"] = settings.selected
    return found


def _by_layers(staged: Staged, config: Any, whole: Any, four: dict[str, Any],
               out: Path) -> tuple[Any, int]:
    """Quantize the staged model piece by piece (layerwise.quantize) into `out`: the model
    saved, and how many of its weights are 4-bit blocks."""
    import shutil

    assert staged.layers is not None
    ranges = _ranges(staged, config, whole)
    where = staged.path.parent
    pieces = where / ".pieces"
    pieces.mkdir(exist_ok=True)
    blocked = 0

    def piece(path: Path, k: int, names: set[str], quantized: set[str]) -> Any:
        nonlocal blocked
        target = pieces / f"{k}.onnx"
        with _marked(quantized):
            _quantize(path, target, _narrowed(config, names), ranges)
        model = load(target, external=False)
        if four:
            floats = onnx.load(str(path), load_external_data=False)
            blocked += four_bit.to_blocks(model, floats, where, staged.params, four)
        save(model, target)  # its weights: blobs in pieces/weights
        return model

    try:
        model = layerwise.quantize(whole, staged.layers, where, piece)
        save(model, out, base=pieces)
    finally:
        shutil.rmtree(pieces, ignore_errors=True)
    return model, blocked


def _registry_ops() -> set[str]:
    """The op types quantize_static quantizes when it is given none."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return {*QLinearOpsRegistry, *QDQRegistry}


def _unshared(model: Any, config: Any) -> Any:
    """A copy of the staged graph whose shared biases are copied as the quantizer under
    `config` copies them (layerwise.unshare_biases), for the pieces: the readers it quantizes
    are those its node filter passes (quantize_static's op types, nodes to quantize and to
    exclude)."""
    ops = set(config.op_types_to_quantize or _registry_ops())
    only = set(config.nodes_to_quantize or [])
    exclude = set(config.nodes_to_exclude or [])
    overridden = set((config.extra_options or {}).get("TensorQuantOverrides", {}))

    def quantized(node: Any) -> bool:
        return node.op_type in ops and (not only or node.name in only) and \
            node.name not in exclude

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    layerwise.unshare_biases(copy.graph, quantized, overridden)
    return copy


@contextmanager
def _marked(names: set[str]) -> Iterator[None]:
    """ONNX Runtime's QDQ quantizer starting with `names` (a piece's inputs that the earlier
    pieces quantized) marked as quantized activations, as the whole graph's quantizer has them
    when it reaches the piece's first node. The quantizer has no option for it: its
    `quantize_model` is wrapped meanwhile."""
    if not names:
        yield
        return
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer

    original = getattr(QDQQuantizer, "quantize_model", None)
    if original is None or not hasattr(QDQQuantizer, "quantize_activation_tensor"):
        raise layerwise.Unstitched("this ONNX Runtime's quantizer cannot be told a piece's "
                                   "quantized inputs")

    def quantize_model(self: Any) -> Any:
        for name in sorted(names):
            self.quantize_activation_tensor(name)
        return original(self)

    QDQQuantizer.quantize_model = quantize_model
    try:
        yield
    finally:
        QDQQuantizer.quantize_model = original


def _narrowed(config: Any, names: set[str]) -> Any:
    """`config` for one piece: its tensor overrides for the tensors the piece names (ORT
    refuses an override of a tensor the model does not have)."""
    import copy

    extra = dict(config.extra_options or {})
    if "TensorQuantOverrides" in extra:
        extra["TensorQuantOverrides"] = {k: v for k, v in extra["TensorQuantOverrides"].items()
                                         if k in names}
    narrowed = copy.copy(config)
    narrowed.extra_options = extra
    return narrowed


def _ranges(staged: Staged, config: Any, model: Any) -> Path:
    """The calibrated ranges with `quant.calibration.headroom` over them (headroom.py)."""
    factor = float((staged.params.get("calibration") or {}).get("headroom", 1))
    return headroom.widened(_calibrated(staged, config, model), factor)


def _calibrated(staged: Staged, config: Any, model: Any) -> Path:
    """The activation ranges of the staged model under `config`'s calibration, collected by
    ONNX Runtime's own calibrator and kept in its calibration-cache format beside the staged
    model: once per staged model and calibration (the repair search quantizes one staged
    model several times), and before the quantizer loads the model, so that the float
    weights are held once at a time: by the calibrator until it has written its augmented
    graph, then by its session; the quantizer then reads only the ranges. A configuration
    that names op types (QNN's: those of the nodes it quantizes) is calibrated on every op
    type of the graph, so that the nodes a rule keeps in float change no range. A graph cut
    in pieces is calibrated piece by piece (layerwise.calibrate): the same ranges, so one cache
    serves both ways (a stitch that falls back reuses them). `model`: the staged graph."""
    import hashlib
    import tempfile

    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data

    extra = config.extra_options or {}
    unsupported = [k for k in ("SmoothQuant", "CalibStridedMinMax", "BlockSize") if extra.get(k)]
    if unsupported:  # quantize_static calibrates these its own way
        raise ValueError(f"calibration with {', '.join(unsupported)} is not supported")
    options = {key: extra[name] for name, key in _CALIBRATION_OPTIONS if name in extra}
    ops = sorted({n.op_type for n in model.graph.node} if config.op_types_to_quantize
                 else _registry_ops())
    what = json.dumps([str(config.calibrate_method), ops, options], sort_keys=True, default=str)
    cache = staged.path.with_name(
        f"{staged.path.name}.ranges-{hashlib.sha256(what.encode()).hexdigest()[:16]}.json")
    if cache.is_file():
        return cache
    if staged.layers is not None:
        from onnxruntime.quantization.calibrate import TensorsData

        def calibrator(path: Path, augmented: Path) -> Any:
            return create_calibrator(
                path, ops, augmented_model_path=str(augmented),
                calibrate_method=config.calibrate_method, use_external_data_format=True,
                providers=config.calibration_providers, extra_options=options)

        ranges = layerwise.calibrate(model, staged.layers, staged.path.parent, staged.feeds,
                                     calibrator)
        save_tensors_data(TensorsData(config.calibrate_method, ranges), cache)
        return cache
    with tempfile.TemporaryDirectory(prefix="calibrate.", dir=staged.path.parent) as tmp:
        calibrator = create_calibrator(
            staged.path, ops, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
            calibrate_method=config.calibrate_method,
            use_external_data_format=True,  # its copy of the weights goes to disk, not memory
            providers=config.calibration_providers, extra_options=options)
        calibrator.collect_data(config.calibration_data_reader)
        save_tensors_data(calibrator.compute_data(), cache)
        del calibrator
    return cache


# quantize_static's calibration options: (its extra_options name, the calibrator's)
_CALIBRATION_OPTIONS = (("CalibTensorRangeSymmetric", "symmetric"),
                        ("CalibMovingAverage", "moving_average"),
                        ("CalibMovingAverageConstant", "averaging_constant"),
                        ("CalibMaxIntermediateOutputs", "max_intermediate_outputs"),
                        ("CalibPercentile", "percentile"))


def _quantize(src: Path, out: Path, config: Any, ranges: Path) -> None:
    """ONNX Runtime's static quantization of `src` into `out` under `config`, with the
    activation ranges read from `ranges` (its calibration cache) instead of calibrating."""
    from onnxruntime.quantization import quantize_static

    quantize_static(
        str(src), str(out), None, calibrate_method=config.calibrate_method,
        quant_format=config.quant_format, activation_type=config.activation_type,
        weight_type=config.weight_type, op_types_to_quantize=config.op_types_to_quantize,
        nodes_to_quantize=config.nodes_to_quantize, nodes_to_exclude=config.nodes_to_exclude,
        per_channel=config.per_channel, reduce_range=config.reduce_range,
        use_external_data_format=config.use_external_data_format,
        calibration_providers=config.calibration_providers, extra_options=config.extra_options,
        calibration_cache_path=str(ranges))


def _qtypes() -> dict[str, Any]:
    from onnxruntime.quantization import QuantType

    return {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8, "uint16": QuantType.QUInt16,
            "int16": QuantType.QInt16, "int4": QuantType.QInt4}


def _config(p: dict[str, Any], path: Path, reader: Any, overrides: dict[str, Any],
            exclude: list[str], qtype: dict[str, Any]) -> Any:
    from onnxruntime.quantization import CalibrationMethod

    method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
              "percentile": CalibrationMethod.Percentile}[p["calibration"]["method"]]
    return CONFIGS[of_params(p).qdq.config](
        p, path, reader, method, qtype[p["activation_type"]],
        qtype[four_bit.default_weight_type(p)],
        overrides, exclude)


def _qnn_config(p: dict[str, Any], path: Path, reader: Any, method: Any, activations: Any,
                weights: Any, overrides: dict[str, Any], exclude: list[str]) -> Any:
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    return get_qnn_qdq_config(
        str(path), reader, calibrate_method=method, activation_type=activations,
        weight_type=weights, per_channel=p["per_channel"], activation_symmetric=p["symmetric"],
        weight_symmetric=p["symmetric"] if p["symmetric"] else None,
        init_overrides=overrides or None, add_qtype_converts=True,
        nodes_to_exclude=exclude or None)


def _generic_config(p: dict[str, Any], path: Path, reader: Any, method: Any, activations: Any,
                    weights: Any, overrides: dict[str, Any], exclude: list[str]) -> Any:
    from onnxruntime.quantization import QuantFormat, StaticQuantConfig

    extra: dict[str, Any] = {"ActivationSymmetric": p["symmetric"],
                             "WeightSymmetric": p["symmetric"]}
    if overrides:  # one Q/DQ per tensor, at its producer's type: the CPU reads any type
        extra["TensorQuantOverrides"] = overrides
    return StaticQuantConfig(
        reader, calibrate_method=method, quant_format=QuantFormat.QDQ,
        activation_type=activations, weight_type=weights, per_channel=p["per_channel"],
        use_external_data_format=True, nodes_to_exclude=exclude or None, extra_options=extra)


# The QDQ configuration builders a target's QdqProfile can name (QNN's knows which ops HTP
# quantizes).
CONFIGS: dict[str, Callable[..., Any]] = {"qnn_qdq_config": _qnn_config,
                                          "static_quant_config": _generic_config}
