"""The target: from `--target`, the recipe's `<ep>/<device>` folders, or `compile.ep_config`;
a portable recipe (no folder, no compile) is built for the target that compiles (qnn_htp) when
it is quantized or fp16, and for the host CPU in fp32. `compile` -> `target.*`. What a target
is and does is its declaration (planner/core/targets.py)."""

from __future__ import annotations

from typing import Any

from planner.core.targets import TARGETS, reference
from planner.recipes import winml
from planner.recipes.draft import Context
from planner.recipes.layout import RecipeFile
from planner.recipes.ledger import BadField, Unsupported

COMPILE = ("compile",)
FOLDER = "(ep/device folder)"  # the target as the recipe's path says it
PROVIDER_OPTIONS = ("htp_performance_mode", "htp_graph_finalization_optimization_mode",
                    "soc_model", "htp_arch", "vtcm_mb", "enable_htp_fp16_precision")


def runs_on(target: str) -> tuple[str, ...]:
    """The steps the target decides: a compiled target's legalize and compile, and verify and
    perf on every target."""
    return (("legalize", *COMPILE) if TARGETS[target].compiles else ()) + ("verify", "perf")


def portable_target(npu: bool) -> str:
    """A portable recipe's target: the one that compiles (the NPU) for a quantized or fp16
    build, else the host CPU."""
    return next(t.name for t in TARGETS.values() if t.compiles) if npu else reference().name


def resolve_target(cx: Context, f: RecipeFile, given: str | None) -> None:
    """Decide cx.target (before the other sections, whose notes depend on it)."""
    ledger = cx.ledger
    provider, device = _compile_ep(ledger.get("compile"))
    if f.ep:
        found, field = winml.target(f.ep, f.device), FOLDER
    elif provider:
        found, field = winml.target(provider, device), "compile.ep_config.provider"
    else:
        found, field = None, ""
    if given:
        said = f"--target {given}" + (f" (the recipe says {found.name})" if found else "")
        ledger.mapped("(--target)", "target", runs_on(given), said, value=given)
        cx.target = given
    elif found is not None and found.modelplan is None:
        raise Unsupported(field if field != FOLDER else f"folder {f.ep}/{f.device}",
                          f"{found.why}; pass {' or '.join(f'--target {t}' for t in TARGETS)} to "
                          "import it for one of those")
    elif found is not None:
        cx.target = str(found.modelplan)
        if field == FOLDER:
            ledger.mapped(FOLDER, "target", runs_on(cx.target), f"the {found.name} folder",
                          value=f"{f.ep}/{f.device}")
    else:
        npu = cx.kind != "none" or f.precision == "fp16"
        cx.target = portable_target(npu)
        why = "a quantized or fp16 build is for the NPU" if npu else "fp32 runs on the CPU"
        ledger.mapped(FOLDER, "target", runs_on(cx.target), "no <ep>/<device> folder and no "
                      f"compile EP (a portable recipe): {why}; --target cpu gives a plain ONNX "
                      "model", value=f"{f.model_dir}/")
    if TARGETS[cx.target].compiles and cx.kind == "none":
        if f.precision != "fp16":
            raise Unsupported("quant", f"null (fp32) does not run on {cx.target}: modelplan "
                              "builds HTP models quantized or fp16; pass --target "
                              f"{reference().name}")
        cx.kind = "fp16"  # fp32 graph, fp16 on the HTP: what the file name promises
    cx.draft.choose("target", cx.target, "the target")


def _compile_ep(section: Any) -> tuple[str | None, str | None]:
    if not isinstance(section, dict):
        return None, None
    ep = section.get("ep_config") or {}
    if not isinstance(ep, dict):
        raise BadField("compile.ep_config", "not a section (an object with provider, ...)")
    provider, device = ep.get("provider"), ep.get("device")
    for key, value in (("provider", provider), ("device", device)):
        if value is not None and not isinstance(value, str):
            raise BadField(f"compile.ep_config.{key}", f"{value!r} is not a name")
    return provider, None if device in (None, "auto") else device


def map_compile(cx: Context) -> None:
    ledger = cx.ledger
    section = ledger.get("compile")
    compiles = TARGETS[cx.target].compiles
    what = f"modelplan compiles {cx.target} builds to an EPContext model" if compiles else \
        f"{cx.target} builds have no compile step"
    if section is None:
        if ledger.has("compile"):
            ledger.mapped("compile", None, COMPILE if compiles else (), f"null: {what}",
                          value=None)
        return
    if not isinstance(section, dict):
        raise BadField("compile", "not a section (an object with ep_config, ...) or null")
    if "compile.ep_config.provider" in ledger.leaves:
        ledger.mapped("compile.ep_config.provider", "target", runs_on(cx.target),
                      f"target={cx.target}")
    if "compile.ep_config.device" in ledger.leaves:
        ledger.mapped("compile.ep_config.device", "target", runs_on(cx.target))
    ep = section.get("ep_config") or {}
    _provider_options(cx, ep.get("provider_options"), compiles)
    _ep_context(cx, ep, compiles, what)


def _provider_options(cx: Context, options: Any, compiles: bool) -> None:
    ledger = cx.ledger
    if options is None:
        return
    if not isinstance(options, dict):
        raise BadField("compile.ep_config.provider_options", "not an object of option: value")
    kept = {k: v for k, v in options.items() if k in PROVIDER_OPTIONS and compiles}
    for key, value in kept.items():
        cx.draft.set(f"target.provider_options.{key}", value,
                     f"compile.ep_config.provider_options.{key}")
    if kept:
        ledger.mapped("compile.ep_config.provider_options", "target.provider_options",
                      runs_on(cx.target), ", ".join(kept), value=kept)
    rest = {k: v for k, v in options.items() if k not in kept}
    if rest:
        why = f"modelplan sets {', '.join(PROVIDER_OPTIONS)} for {cx.target} only" if compiles \
            else f"no provider options on {cx.target}"
        ledger.dropped("compile.ep_config.provider_options", why, value=rest)
    elif not kept:
        ledger.mapped("compile.ep_config.provider_options", None, (), "none", value={})


def _ep_context(cx: Context, ep: dict[str, Any], compiles: bool, what: str) -> None:
    ledger = cx.ledger
    for key, default in (("enable_ep_context", True), ("embed_context", False)):
        path = f"compile.ep_config.{key}"
        if path not in ledger.leaves:
            continue
        value = ep.get(key, default)
        if key == "embed_context" and compiles:
            cx.draft.set("target.embed_context", bool(value), path)
            ledger.mapped(path, "target.embed_context", COMPILE)
        elif key == "enable_ep_context" and value == compiles:
            ledger.mapped(path, None, COMPILE if compiles else (), what)
        else:
            ledger.dropped(path, what)
    notes = {"compiler": ("ort", "modelplan compiles with ONNX Runtime's QNN EP"),
             "qnn_sdk_root": (None, "modelplan uses the QNN libraries of onnxruntime-qnn")}
    for key, (ok, why) in notes.items():
        path = f"compile.ep_config.{key}"
        if path in ledger.leaves:
            value = ep.get(key)
            if value in (ok, None) or (key == "compiler" and value == "ort_session"):
                ledger.mapped(path, None, COMPILE if compiles else (), why)
            else:
                ledger.dropped(path, why)
    for key in ("validate", "verbose"):
        if f"compile.{key}" in ledger.leaves:
            ledger.dropped(f"compile.{key}", "modelplan always checks the compiled model "
                           "(its compiled fact) and verifies it; logging is --quiet/--debug")
