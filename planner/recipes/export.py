"""`export` -> `export.*`: exporter, opset, batch size, hierarchy tags, and the input and
output tensors (the full `export.inputs` / `export.outputs` of a single graph; the shapes of
an encoder-decoder pair, whose graphs' inputs modelplan derives)."""

from __future__ import annotations

from typing import Any

from planner.recipes.draft import Context
from planner.recipes.ledger import BadField

STEP = ("export",)
DTYPES = ("int64", "int32", "float32", "float16", "bool")
# Ranges for inputs whose recipe spec has no value_range.
DEFAULT_RANGES = {"attention_mask": (0, 1), "token_type_ids": (0, 1),
                  "decoder_attention_mask": (0, 1), "pixel_values": (0.0, 1.0),
                  "input_values": (-1.0, 1.0)}


def map_export(cx: Context) -> None:
    ledger, draft = cx.ledger, cx.draft
    ex = ledger.get("export", {})  # absent: winml-cli's defaults; null: an ONNX-file build
    if ex is None:
        raise BadField("export", "null: an ONNX-file build (no export); modelplan imports "
                       "recipes that export a Hugging Face model (use model=onnx_file for an "
                       "ONNX file)")
    if not isinstance(ex, dict):
        raise BadField("export", "not a section (an object with opset_version, ...)")
    dynamo = ex.get("dynamo", False)
    if not isinstance(dynamo, bool):
        raise BadField("export.dynamo", f"{dynamo!r} is not true or false")
    draft.choose("export", "dynamo" if dynamo else "torchscript", "export.dynamo")
    if "dynamo" in ex:
        ledger.mapped("export.dynamo", "export.exporter", STEP)
    _bounded(cx, ex, "opset_version", "export.opset", 17, (14, 21), "opsets")
    batch = _bounded(cx, ex, "batch_size", "export.shapes.batch_size", 1, (1, 64), "batch sizes")
    _hierarchy(cx, ex)
    _fixed(cx, ex)
    if cx.pair:
        _pair_shapes(cx, ex.get("input_tensors") or [])
        _pair_outputs(cx, ex.get("output_tensors"))
    else:
        _inputs(cx, ex.get("input_tensors"), batch)
        _outputs(cx, ex.get("output_tensors"))


def _bounded(cx: Context, ex: dict[str, Any], key: str, to: str, default: int,
             bounds: tuple[int, int], what: str) -> int:
    """An integer export field within modelplan's bounds -> one config key."""
    value, (lo, hi) = ex.get(key, default), bounds
    if type(value) is not int or not lo <= value <= hi:
        raise BadField(f"export.{key}", f"{value!r}: modelplan exports {what} {lo} to {hi}")
    cx.draft.set(to, value, f"export.{key}")
    if key in ex:
        cx.ledger.mapped(f"export.{key}", to, STEP)
    return value


def _hierarchy(cx: Context, ex: dict[str, Any]) -> None:
    ledger = cx.ledger
    tags = bool(ex.get("enable_hierarchy_tags", True)) and not ex.get("clean_onnx", False)
    cx.draft.set("export.hierarchy", tags, "export.enable_hierarchy_tags, clean_onnx")
    for key in ("enable_hierarchy_tags", "clean_onnx"):
        if key in ex:
            ledger.mapped(f"export.{key}", "export.hierarchy", ("export", "tag"),
                          "hierarchy tags " + ("on" if tags else "off"))
    fmt = ex.get("hierarchy_tag_format")
    if fmt is None:
        return
    if fmt == "full" or not tags:
        ledger.mapped("export.hierarchy_tag_format", None, ("tag",),
                      "modelplan's tags are full class paths (/BertModel/BertEncoder/"
                      "BertLayer.0/...)" if tags else "no tags")
    else:
        ledger.dropped("export.hierarchy_tag_format", "modelplan writes full class-path tags "
                       "only")


def _fixed(cx: Context, ex: dict[str, Any]) -> None:
    """Fields whose recipe value modelplan always has, or cannot honour."""
    ledger = cx.ledger
    always = {
        "export_params": (True, "modelplan's export stores the weights"),
        "do_constant_folding": (True, ("modelplan's export folds constants (and normalize "
                                       "runs ONNX Runtime's constant folding)")),
        "compatibility.transformers_attention": ("eager", ("modelplan always loads the model "
                                                           "with eager attention")),
    }
    for key, (value, why) in always.items():
        path = f"export.{key}"
        if path not in ledger.leaves:
            continue
        if ledger.get(path) == value:
            ledger.mapped(path, None, STEP, why)
        else:
            ledger.dropped(path, why)
    if "export.verbose" in ledger.leaves:
        ledger.dropped("export.verbose", "winml-cli's export logging; no effect on the model")
    if "export.dynamic_axes" in ledger.leaves:
        if ex.get("dynamic_axes"):
            ledger.dropped("export.dynamic_axes", "modelplan exports static shapes (QNN HTP "
                           "needs them)")
        else:
            ledger.mapped("export.dynamic_axes", None, STEP, "none: static shapes")


def _spec(t: Any, i: int) -> dict[str, Any]:
    """One recipe input tensor as a modelplan input spec (value_range's max is exclusive for
    integers, as winml-cli draws them with torch.randint)."""
    where = f"export.input_tensors[{i}]"
    if not isinstance(t, dict) or not isinstance(t.get("name"), str):
        raise BadField(where, "not a tensor spec with a name")
    dtype, shape = t.get("dtype"), t.get("shape")
    if dtype not in DTYPES:
        raise _Incomplete(f"{t['name']}: dtype {dtype!r} (modelplan: {', '.join(DTYPES)})")
    if not isinstance(shape, list) or not shape:
        raise _Incomplete(f"{t['name']}: no shape")
    dims = [d if isinstance(d, int) and d >= 1 else 1 for d in shape]
    rng = t.get("value_range") or DEFAULT_RANGES.get(t["name"])
    if rng is None:
        raise _Incomplete(f"{t['name']}: no value_range")
    if not (isinstance(rng, list | tuple) and len(rng) == 2 and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in rng)):
        raise BadField(f"{where}.value_range", f"{rng!r} is not [low, high]")
    lo, hi = rng
    if dtype.startswith("int") or dtype == "bool":
        hi = max(lo, hi - 1)
    return {"name": t["name"], "dtype": dtype, "shape": dims, "min": lo, "max": hi}


class _Incomplete(Exception):
    """A recipe tensor spec modelplan cannot take as it is."""


def _inputs(cx: Context, tensors: Any, batch: int) -> None:
    ledger = cx.ledger
    if tensors is None:
        return
    if not isinstance(tensors, list):
        raise BadField("export.input_tensors", "not a list of tensor specs")
    try:
        specs = [_spec(t, i) for i, t in enumerate(tensors)]
    except _Incomplete as exc:
        ledger.dropped("export.input_tensors", f"{exc}; modelplan derives the inputs from the "
                       "checkpoint instead")
        return
    symbolic = [t["name"] for t in tensors if any(not isinstance(d, int) for d in t["shape"])]
    cx.draft.set("export.inputs", specs, "export.input_tensors")
    note = "names, dtypes, shapes; value_range [lo, hi) -> min lo, max hi-1 for integers"
    if symbolic:
        note += f"; symbolic dims of {', '.join(symbolic)} exported as 1 (static shapes)"
    if any(s["shape"][0] != batch for s in specs):
        note += f"; their batch dims differ from export.batch_size {batch}: the specs win"
    ledger.mapped("export.input_tensors", "export.inputs", STEP, note)


def _outputs(cx: Context, tensors: Any) -> None:
    if tensors is None:
        return
    if not isinstance(tensors, list) or not all(isinstance(t, dict) and isinstance(
            t.get("name"), str) for t in tensors):
        raise BadField("export.output_tensors", "not a list of tensor specs with names")
    names = [t["name"] for t in tensors]
    cx.draft.set("export.outputs", names, "export.output_tensors")
    cx.ledger.mapped("export.output_tensors", "export.outputs", STEP, "output names, in order")


def _pair_shapes(cx: Context, tensors: list[Any]) -> None:
    """An encoder's or decoder's recipe inputs -> export.shapes (modelplan derives the rest)."""
    by_name = {t.get("name"): t.get("shape") or [] for t in tensors if isinstance(t, dict)}
    set_ = []
    if cx.role == "encoder":
        if len(by_name.get("input_ids") or []) >= 2:
            set_.append(("sequence_length", by_name["input_ids"][1]))
        pixels = by_name.get("pixel_values") or []
        if len(pixels) == 4:
            h, w = pixels[2], pixels[3]
            set_.append(("image_size", h if h == w else [h, w]))
    else:
        past = next((s for n, s in by_name.items() if str(n).startswith("past_")), None)
        ids = by_name.get("decoder_input_ids") or by_name.get("input_ids") or []
        length = past[2] if past and len(past) == 4 else ids[1] if len(ids) >= 2 else None
        if length:
            set_.append(("decoder_sequence_length", length))
    set_ = [(k, v) for k, v in set_ if all(isinstance(x, int) and x >= 1 for x in
                                           (v if isinstance(v, list) else [v]))]
    # (decoder_cache is added after this check: a flag, not a size)
    cached = cx.role == "decoder" and any(str(n).startswith("past_") for n in by_name)
    if cached:  # one new token over a static KV cache: modelplan's cached decoder
        set_.append(("decoder_cache", True))
    for key, value in set_:
        cx.draft.set(f"export.shapes.{key}", value, f"{cx.role}:export.input_tensors")
    said = ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in set_) \
        or "nothing"
    note = (f"export.shapes: {said}; modelplan derives the {cx.role} graph's input names and "
            "dtypes (int64 ids)")
    if cached:
        note += ("; winml-cli's decoder takes one new token and a static KV cache (past_*, "
                 "cache_position), as modelplan's cached decoder does (its own names: "
                 "past_key_values.<layer>.key, position_ids, and a cross graph that computes "
                 "the cross-attention keys and values once)")
    cx.ledger.mapped("export.input_tensors", "export.shapes", STEP, note)


def _pair_outputs(cx: Context, tensors: Any) -> None:
    if tensors is None:
        return
    names = [t.get("name") for t in tensors if isinstance(t, dict)]
    if cx.role == "encoder":
        cx.ledger.mapped("export.output_tensors", None, STEP, "the encoder's hidden states "
                         "(modelplan names them last_hidden_state)")
    elif any(str(n).startswith("present_") for n in names):
        cx.ledger.mapped("export.output_tensors", None, STEP, "the logits and present_* "
                         "KV-cache outputs: modelplan's cached decoder gives the logits and "
                         "the new token's keys and values (present.<layer>.key/value)")
    else:
        cx.ledger.mapped("export.output_tensors", None, STEP, "the decoder's logits")
