"""Lower a validated config into steps: the pipeline as the user asked for it, before any proof."""

from __future__ import annotations

from typing import Any

from planner import sources
from planner.keys import config_digest
from planner.plan import Plan, Step
from planner.storelayout import store_root


def target_id(target: dict[str, Any]) -> str:
    """What legality and compilation are for: the EP and its backend (e.g. qnn_htp)."""
    return "_".join(p for p in (target["ep"], target["backend"]) if p)


def lower(config: dict[str, Any]) -> Plan:
    """Steps in the order a user would write them: export, tag, normalize, optimize, quantize,
    compile, verify, perf. Rules then move, insert and elide steps, each with its proof."""
    model, target = config["model"], config["target"]
    memo = sources.DigestMemo(store_root(config) / "digests.json")
    where = sources.locate(model)
    info = sources.model_info(model, where)
    task, model_class = sources.detect_task(model, info)
    resolve = Step("resolve", "resolve", {
        **{k: model[k] for k in ("source", "package", "hub_id", "trust_remote_code",
                                 "random_init")},
        "path": str(where) if where else None, "task": task, "model_class": model_class,
        "digest": sources.source_digest(model, where, memo)})
    memo.save()
    steps = [resolve]
    chain = resolve.id
    if model["source"] != "onnx_file":
        steps += _export_and_tag(config, info, task)
        chain = "tag"
    steps.append(Step("normalize", "normalize", {}, {"model": chain}))
    steps.append(Step("optimize", "optimize", {"flags": sorted(config["optim"]["flags"])},
                      {"model": "normalize"}))
    fp32 = chain = "optimize"
    steps += _quantize_and_compile(config, chain)
    deliverable = steps[-1].id
    steps += _sinks(config, deliverable, fp32, target)
    return Plan(config=config, config_digest=config_digest(config), steps=steps,
                deliverable=deliverable)


def _export_and_tag(config: dict[str, Any], info: dict[str, Any], task: str | None) -> list[Step]:
    ex = config["export"]
    inputs = ex["inputs"] or sources.derive_inputs(info, task, ex["batch_size"],
                                                   ex["sequence_length"])
    export = Step("export", "export", {"exporter": ex["exporter"], "opset": ex["opset"],
                                       "inputs": inputs, "report": ex["report"]},
                  {"model": "resolve"})
    tag = Step("tag", "tag", {}, {"model": "export", "hierarchy": "export"})
    return [export, tag]


def _quantize_and_compile(config: dict[str, Any], chain: str) -> list[Step]:
    quant, target = config["quant"], config["target"]
    steps = []
    if quant["kind"] != "none":
        steps.append(Step("quantize", "quantize", {
            **{k: quant[k] for k in ("kind", "weight_type", "activation_type", "per_channel",
                                     "symmetric", "calibration")},
            "profile": target_id(target) if target["ep"] != "cpu" else "cpu"},
            {"model": chain, "source": "resolve"}))
        chain = "quantize"
    if target["ep"] != "cpu":
        steps.append(Step("compile", "compile", {
            "target": target_id(target), "ep": target["ep"], "backend": target["backend"],
            "embed_context": target["embed_context"], "cpu_fallback": target["cpu_fallback"],
            "provider_options": dict(sorted(target["provider_options"].items()))},
            {"model": chain}))
    return steps


def _sinks(config: dict[str, Any], deliverable: str, fp32: str,
           target: dict[str, Any]) -> list[Step]:
    verify, perf = config["verify"], config["perf"]
    ep = {"ep": target["ep"], "backend": target["backend"],
          "provider_options": dict(sorted(target["provider_options"].items()))}
    steps = []
    if verify["metric"] != "none":
        steps.append(Step("verify", "verify", {
            **{k: verify[k] for k in ("metric", "reference", "threshold", "samples")}, **ep},
            {"candidate": deliverable, "reference": fp32, "source": "resolve"}))
    if perf["iterations"] > 0:
        steps.append(Step("perf", "perf", {"iterations": perf["iterations"],
                                           "warmup": perf["warmup"], **ep},
                          {"model": deliverable}))
    return steps
