"""`optim` -> `optim.flags` (the fusions modelplan runs) and the legalize step (mask constants
and IsNaN guards); winml-cli's top-level switches."""

from __future__ import annotations

from typing import Any

from planner.core.ops import FUSIONS
from planner.recipes import winml
from planner.recipes.draft import Context, Draft
from planner.recipes.ledger import BadField

STEP = ("optimize",)
PACKAGED = {"none": (), "transformer": ("gelu", "layer_norm", "matmul_add")}


def map_optim(cx: Context) -> None:
    ledger = cx.ledger
    optim = ledger.get("optim")
    if optim is None:
        optim = {}
    if not isinstance(optim, dict):
        raise BadField("optim", "not a section (an object of capability: true/false)")
    if not optim and ledger.has("optim"):
        ledger.mapped("optim", "optim", STEP, "no fusions", value={})
    flags: list[str] = []
    for key, value in optim.items():
        path = f"optim.{key}"
        fusion = key.removesuffix("_fusion")
        if key in winml.LEGALIZE:
            _legalize(cx, key, value)
        elif key.endswith("_fusion") and fusion in FUSIONS:
            if value is True and fusion not in flags:
                flags.append(fusion)
            ledger.mapped(path, "optim.flags", STEP, fusion if value is True else "off")
        elif value is False:
            ledger.mapped(path, None, STEP, "off, as in modelplan (it never runs it)")
        elif key in winml.CAPABILITIES:
            ledger.dropped(path, "not a fusion modelplan runs (modelplan's: "
                           f"{', '.join(FUSIONS)})")
        else:
            ledger.dropped(path, "not an optimization winml-cli knows either (it ignores it)")
    skip = ledger.get("skip_optimize")
    if skip:
        flags = []
        ledger.mapped("skip_optimize", "optim.flags", STEP, "no fusions (normalize still runs: "
                      "shape inference and ONNX Runtime's basic level)")
    elif ledger.has("skip_optimize"):
        ledger.mapped("skip_optimize", None, STEP, "false: optimize as optim says")
    choose_optim(cx.draft, flags)


def choose_optim(draft: Draft, flags: list[str]) -> None:
    """The packaged optim option with exactly these flags, else none with optim.flags set."""
    flags = sorted(set(flags))
    draft.fusions = flags
    named = next((n for n, f in PACKAGED.items() if sorted(f) == flags), None)
    draft.choose("optim", named or "none", "optim")
    draft.values.pop("optim", None)
    if named is None:
        draft.set("optim.name", "recipe", "optim")
        draft.set("optim.flags", flags, "optim")


def _legalize(cx: Context, key: str, value: Any) -> None:
    """clamp_constant_values, remove_isnan_in_attention_mask: legalize rewrites for qnn_htp."""
    ledger, path = cx.ledger, f"optim.{key}"
    does = winml.LEGALIZE[key]
    if cx.target == "qnn_htp":
        if value:
            ledger.mapped(path, None, ("legalize",), f"legalize{{qnn_htp}} {does}; the "
                          "target-legalize rule inserts it for every qnn_htp build")
        else:
            ledger.dropped(path, f"legalize{{qnn_htp}} always {does}: HTP rejects what it "
                           "removes")
        return
    if not value:
        ledger.mapped(path, None, (), "off: modelplan legalizes for qnn_htp only")
    elif key == "clamp_constant_values" and cx.kind == "fp16":
        ledger.mapped(path, None, ("quantize",), "fp16 conversion clamps every float constant "
                      "into the float16 range (+-65504), so mask constants stay finite")
    elif key == "clamp_constant_values":
        ledger.dropped(path, f"modelplan legalizes for qnn_htp only; on {cx.target} the "
                       "model keeps its exported mask constants")
    else:
        ledger.dropped(path, f"the {cx.target} EP runs IsNaN; modelplan drops these guards "
                       "for qnn_htp only (HTP has no IsNaN)")


def map_extras(cx: Context) -> None:
    """winml-cli's top-level switches and keys it does not read."""
    ledger = cx.ledger
    if ledger.has("auto"):
        ledger.dropped("auto", "winml-cli completes missing settings at build time; a "
                       "modelplan config is complete as written")
    for path in list(ledger.leaves):
        top = path.split(".")[0]
        if top not in winml.TOP_LEVEL:
            ledger.dropped(path, "not a WinMLBuildConfig section: winml-cli does not read it")
