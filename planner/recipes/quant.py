"""`quant` -> the matching packaged `quant` group plus overrides: static QDQ (w8a16_pc, w8a16,
w8a8, w4a16 and any other weight/activation types), fp16 conversion, or none (fp32)."""

from __future__ import annotations

from typing import Any

from planner.core.mixed_precision import shown
from planner.recipes import winml
from planner.recipes.draft import Context
from planner.recipes.ledger import BadField, Unsupported

STEP = ("quantize",)
TYPES = ("uint8", "int8", "uint16", "int16")
WEIGHT_TYPES = (*TYPES, "int4")  # int4: QuantType.QInt4, as w4a16 quantizes weights
METHODS = ("minmax", "entropy", "percentile")
# The packaged qdq groups: (weight_type, activation_type, per_channel).
QDQ_GROUPS = {"w8a16_pc": ("uint8", "uint16", True), "w8a16": ("uint8", "uint16", False),
              "w8a8": ("uint8", "uint8", False), "w4a16": ("int4", "uint16", True)}
WINML_DEFAULTS = {"weight_type": "uint8", "activation_type": "uint8", "per_channel": False,
                  "symmetric": False, "samples": 10, "calibration_method": "minmax"}
ONLY_FOR = {"rtn_bits": "rtn", "rtn_block_size": "rtn", "rtn_symmetric": "rtn",
            "rtn_accuracy_level": "rtn", "reduce_range": "dynamic",
            "fp16_keep_io_types": "fp16", "fp16_op_block_list": "fp16"}
CALIBRATION_ONLY = ("samples", "calibration_samples", "calibration_method", "weight_type", "activation_type",
                    "per_channel", "symmetric", "weight_symmetric", "activation_symmetric",
                    "save_calibration", "distribution", "seed", "calibration_load_path",
                    "calibration_save_path", "op_types_to_quantize", "nodes_to_exclude",
                    "dataset_name")


def kind_of(quant: Any) -> str:
    """none | qdq | fp16 for a recipe's quant section (raises for modes modelplan lacks)."""
    if quant is None:
        return "none"
    if not isinstance(quant, dict):
        raise BadField("quant", "not a section (an object with mode, weight_type, ...) or null")
    mode = quant.get("mode", "static")
    if not isinstance(mode, str):
        raise BadField("quant.mode", f"{mode!r} is not a mode name (static, qdq, fp16, ...)")
    if mode in winml.UNSUPPORTED_QUANT:
        raise Unsupported("quant.mode", f"{mode!r}: {winml.UNSUPPORTED_QUANT[mode]}")
    if mode not in winml.QUANT_MODES:
        raise BadField("quant.mode", f"{mode!r} is not a winml-cli mode (static, qdq, dynamic, "
                       "rtn, fp16)")
    return winml.QUANT_MODES[mode]


def map_quant(cx: Context, file_precision: str | None) -> None:
    ledger = cx.ledger
    quant = ledger.get("quant")
    if quant is None and cx.kind == "fp16":
        cx.draft.choose("quant", "fp16", "quant: null, file name fp16")
        ledger.mapped("quant", "quant", STEP, "null, and the file name says fp16: winml-cli "
                      "exports fp32 and QNN HTP runs it in fp16 (enable_htp_fp16_precision); "
                      "modelplan converts the model to fp16 and compiles it with that option",
                      value=None)
        return
    if cx.kind == "none":
        cx.draft.choose("quant", "none", "quant: null")
        said = "" if file_precision in (None, "fp32") else (
            f" (the file name says {file_precision}: winml-cli exports fp32 and leaves "
            f"{file_precision} to the execution provider; {cx.target} runs fp32)")
        ledger.mapped("quant", "quant", STEP, f"no quantization: fp32{said}", value=None)
        return
    mode = quant.get("mode", "static")
    if "mode" in quant:
        ledger.mapped("quant.mode", "quant.kind", STEP, f"{mode} -> {cx.kind}")
    if cx.kind == "fp16":
        _fp16(cx, quant)
    else:
        _qdq(cx, quant)
    _common(cx, quant)


def _fp16(cx: Context, quant: dict[str, Any]) -> None:
    ledger = cx.ledger
    cx.draft.choose("quant", "fp16", "quant.mode")
    keep = quant.get("fp16_keep_io_types", True)
    if "fp16_keep_io_types" in quant:
        if keep:
            ledger.mapped("quant.fp16_keep_io_types", None, STEP, "modelplan keeps float32 "
                          "inputs and outputs (convert_float_to_float16 keep_io_types)")
        else:
            ledger.dropped("quant.fp16_keep_io_types", "modelplan keeps float32 inputs and "
                           "outputs; the built model's I/O stays float32")
    if "fp16_op_block_list" in quant:
        if quant["fp16_op_block_list"]:
            ops = _names(quant, "fp16_op_block_list")
            _add_rules(cx, "quant.fp16_op_block_list",
                       [{"op_types": ops, "precision": "float"}],
                       "these op types stay float32 (convert_float_to_float16 op_block_list)")
        else:
            ledger.mapped("quant.fp16_op_block_list", None, STEP, "none: ONNX Runtime's default "
                          "block list, as modelplan converts")
    for key in CALIBRATION_ONLY:
        if key in quant:
            ledger.dropped(f"quant.{key}", "not used by fp16 conversion (winml-cli ignores it "
                           "in fp16 mode too)")


def _qdq(cx: Context, quant: dict[str, Any]) -> None:
    ledger, draft = cx.ledger, cx.draft
    w = _one_of(quant, "weight_type", WEIGHT_TYPES)
    a = _one_of(quant, "activation_type", TYPES)
    pc = _flag(quant, "per_channel")
    group = next((g for g, v in QDQ_GROUPS.items() if v == (w, a, pc)), None) or \
        ("w4a16" if (w, a) == ("int4", "uint16") else "w8a16" if a.endswith("16") else "w8a8")
    draft.choose("quant", group, "quant.weight_type, activation_type, per_channel")
    base = dict(zip(("weight_type", "activation_type", "per_channel"), QDQ_GROUPS[group],
                    strict=True))
    for key, value in (("weight_type", w), ("activation_type", a), ("per_channel", pc)):
        if value != base[key]:
            draft.set(f"quant.{key}", value, f"quant.{key}")
        if key in quant:
            ledger.mapped(f"quant.{key}", f"quant.{key}", STEP, f"quant={group}"
                          + ("" if value == base[key] else f" with quant.{key}={value}"))
    _symmetric(cx, quant)
    samples = quant.get("samples", quant.get("calibration_samples", WINML_DEFAULTS["samples"]))
    if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= 4096:
        raise BadField("quant.samples", f"{samples!r} is not a sample count from 1 to 4096")
    method = _one_of(quant, "calibration_method", METHODS)
    draft.set("quant.calibration", {"method": method, "samples": samples},
              "quant.calibration_method, samples")
    if "samples" in quant and "calibration_samples" in quant:
        ledger.dropped("quant.calibration_samples", "winml-cli's old name for samples, which "
                       "the recipe also sets (samples wins)")
    for key in ("samples", "calibration_samples", "calibration_method"):
        if f"quant.{key}" in ledger.leaves:
            ledger.mapped(f"quant.{key}", "quant.calibration", STEP)
    for key, mode in ONLY_FOR.items():
        if key in quant:
            ledger.dropped(f"quant.{key}", f"only used in winml-cli's {mode} mode")


def _symmetric(cx: Context, quant: dict[str, Any]) -> None:
    ledger = cx.ledger
    sym = _flag(quant, "symmetric")
    per = {k: quant.get(f"{k}_symmetric") for k in ("weight", "activation")}
    for k, v in per.items():
        if v is not None and not isinstance(v, bool):
            raise BadField(f"quant.{k}_symmetric", f"{v!r} is not true, false or null")
    set_ = {v for v in per.values() if v is not None}
    if len(set_) == 1 and all(v is not None for v in per.values()):
        sym = set_.pop()
        for k in per:
            ledger.mapped(f"quant.{k}_symmetric", "quant.symmetric", STEP)
    else:
        for k, v in per.items():
            if v is None and f"{k}_symmetric" in quant:
                ledger.mapped(f"quant.{k}_symmetric", None, STEP, "null: follows symmetric")
            elif v is not None:
                ledger.dropped(f"quant.{k}_symmetric", "modelplan has one quant.symmetric for "
                               f"weights and activations; quant.symmetric={str(sym).lower()} "
                               "is used")
    if sym:
        cx.draft.set("quant.symmetric", True, "quant.symmetric")
    if "symmetric" in quant:
        ledger.mapped("quant.symmetric", "quant.symmetric", STEP)


def _common(cx: Context, quant: dict[str, Any]) -> None:
    """Fields of both modes: calibration data, excluded ops, winml-cli's model policies."""
    ledger = cx.ledger
    notes = {
        "distribution": "the distribution of winml-cli's random calibration data; modelplan "
                        "calibrates on real samples (shipped sentences, photographs, speech "
                        "through the model's preprocessor)",
        "dataset_name": "a Hugging Face dataset, not read offline; modelplan calibrates on its "
                        "shipped samples",
        "seed": "modelplan's calibration samples are fixed (seeded per split)",
        "calibration_load_path": "modelplan keeps calibration inside the quantize step",
        "calibration_save_path": "modelplan keeps calibration inside the quantize step",
        "save_calibration": "modelplan keeps calibration inside the quantize step",
    }
    if cx.kind == "qdq":
        _exclusions(cx, quant)
    for key, why in notes.items():
        path = f"quant.{key}"
        if path not in ledger.leaves:
            continue
        if quant.get(key) in (None, False):
            ledger.mapped(path, None, STEP, f"not set: {why}")
        else:
            ledger.dropped(path, why)
    if "quant.model_type" not in ledger.leaves:
        return
    if cx.kind == "fp16":
        ledger.mapped("quant.model_type", None, STEP, "the model type (no policy in fp16 mode)")
    else:
        ledger.dropped("quant.model_type", "selects winml-cli's own quantization policy for "
                       f"{quant['model_type']!r} (calibration reader, excluded nodes, fixed "
                       "types); modelplan has none and quantizes every node")


def _exclusions(cx: Context, quant: dict[str, Any]) -> None:
    """What winml-cli keeps unquantized (op_types_to_quantize: every op type it does not list;
    nodes_to_exclude: these nodes) as quant.overrides rules that keep them float."""
    kept = {"op_types_to_quantize": ("except_op_types", ("the op types it does not list stay "
                                     "float")),
            "nodes_to_exclude": ("nodes", ("these nodes stay float (names as the quantize step's "
                                 "input names them; a name the graph lacks fails the step)"))}
    for key, (selector, said) in kept.items():
        path = f"quant.{key}"
        if path not in cx.ledger.leaves:
            continue
        if quant.get(key) in (None, False, []):
            cx.ledger.mapped(path, None, STEP, "not set: every node is quantized")
        else:
            _add_rules(cx, path, [{selector: _names(quant, key), "precision": "float"}], said)


def _add_rules(cx: Context, path: str, rules: list[dict[str, Any]], said: str) -> None:
    found = cx.draft.get("quant.overrides", []) + rules
    cx.draft.set("quant.overrides", found, path)
    cx.ledger.mapped(path, "quant.overrides", STEP,
                     f"{', '.join(shown(r) for r in rules)}: {said}")


def _names(quant: dict[str, Any], key: str) -> list[str]:
    value = quant[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadField(f"quant.{key}", f"{value!r} is not a list of names")
    return sorted(set(value))


def _one_of(quant: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = quant.get(key, WINML_DEFAULTS[key])
    if value not in allowed:
        raise BadField(f"quant.{key}", f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _flag(quant: dict[str, Any], key: str) -> bool:
    value = quant.get(key, WINML_DEFAULTS[key])
    if not isinstance(value, bool):
        raise BadField(f"quant.{key}", f"{value!r} is not true or false")
    return value
