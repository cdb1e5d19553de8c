"""Lower a validated config into steps: the pipeline as the user asked for it, before any proof.

One chain per graph the model exports: a single graph ("model"), or an encoder and a decoder
that share `resolve` and meet again in a `bundle` step, the pair being the deliverable.
"""

from __future__ import annotations

from typing import Any

from planner.core import axes, lower_generation, mixed_precision, module_perf
from planner.core.keys import config_digest
from planner.core.plan import Plan, Step, graph_step_id
from planner.core.storelayout import store_root
from planner.core.targets import of_config
from planner.core.targets import reference as reference_target
from planner.models import datasets, evaldata, evaluation, footprint, roles, sources, specs
from planner.models import tasks as T
from planner.support.memo import copied, frozen, remembered

SYMBOLIC = "<from the checkpoint>"  # specs of a source that could not be read here
READ_BY_FACTS = ("model", "export", "target", "quant", "eval", "store")  # the sections it reads


def build_facts(config: dict[str, Any], symbolic: bool = False) -> dict[str, Any]:
    """What the planner knows of the model before any step: where it is, its task, its class,
    its modality and the specs of every graph it exports (what `modelplan inspect` shows).
    symbolic: a source that cannot be read here gets a symbolic digest and symbolic specs
    (see sources.read_source). In a memo session, once per content of the sections it reads
    (its graphs' specs copied: they become step params)."""
    known = remembered("facts", frozen([symbolic, *(config[k] for k in READ_BY_FACTS)]),
                       lambda: _facts(config, symbolic))
    return {**known, "graphs": copied(known["graphs"])}


def _facts(config: dict[str, Any], symbolic: bool) -> dict[str, Any]:
    model = config["model"]
    index = store_root(config) / "digests.json"
    memo = remembered("digest-memo", index, lambda: sources.DigestMemo(index))
    src = remembered("source", (frozen(model), index, symbolic),
                     lambda: sources.read_source(model, memo, symbolic))
    where, info = src.where, src.info
    out: dict[str, Any] = {"where": where, "info": info, "task": model["task"],
                           "model_class": model["model_class"], "modality": None,
                           "graphs": {"model": None}, "digest": src.digest,
                           "symbolic": src.symbolic}
    if config["eval"]["kind"] != "none":
        out["dataset"] = remembered("dataset", (frozen(config["eval"]), index, symbolic),
                                    lambda: datasets.read(config["eval"], memo, symbolic))
    memo.save()
    ex = config["export"]
    if src.symbolic and model["source"] != "onnx_file":  # axes as a text model's: most are
        out["graphs"] = axes.free_or_fixed(config, T.TEXT, {"model": {"inputs": ex["inputs"] or SYMBOLIC,
                                                         "outputs": ex["outputs"] or SYMBOLIC}})
    elif model["source"] != "onnx_file":
        files = remembered("checkpoint-files", where, lambda: sources.checkpoint_files(where))
        task, model_class = T.detect(model, info, files)
        modality = lower_generation.checked_modality(task, info, model_class, ex["shapes"])
        if modality in T.GRAPHS and (ex["inputs"] or ex["outputs"]):
            raise _custom_io_for_pair(modality, "inputs" if ex["inputs"] else "outputs")
        if ex["inputs"]:
            graphs = {"model": {"inputs": ex["inputs"], "outputs": T.task_outputs(task, info)}}
        else:
            graphs = specs.graph_specs(info, sources.preprocessor_info(model, where), task,
                                       modality, ex["shapes"],
                                       lower_generation.check_on_host(ex, modality, info))
        if ex["outputs"]:
            graphs["model"]["outputs"] = list(ex["outputs"])
        saved = specs.weights_dtype(info)
        for spec in axes.free_or_fixed(config, modality, graphs).values():
            if saved not in (None, "float32"):  # export upcasts: said in the plan and the key
                spec["upcast"] = saved
        graphs = lower_generation.genai_encoder_decoder(config, modality, info, graphs)
        for graph in lower_generation.free_past_graphs(config, modality, graphs):
            graphs[graph]["dynamic"] = True
        count = lower_generation.parts(config, info, modality)
        if count is not None:
            for spec in graphs.values():
                spec["parts"] = count
        out.update(task=task, model_class=model_class, modality=modality, graphs=graphs)
    return out


def _custom_io_for_pair(modality: str, which: str) -> Exception:
    from planner.errors import ConfigError

    return ConfigError(f"export.{which}: a {modality} model exports an encoder and a decoder "
                       f"graph, whose {which} are derived; use export.shapes.* instead")


def lower(config: dict[str, Any], symbolic: bool = False) -> Plan:
    """Steps in the order a user would write them: export, tag, normalize, optimize, quantize,
    compile, verify, perf. Rules then move, insert and elide steps, each with its proof.
    symbolic: a source that cannot be read gets a symbolic key (see sources.read_source)."""
    model = config["model"]
    known = build_facts(config, symbolic)
    random_init = copied(remembered("random-init", frozen(model),
                                    lambda: sources.random_init(model))) \
        if model["source"] == "random_init" else None
    path = str(known["where"]) if known["where"] else model["path"] if known["symbolic"] \
        else None
    resolve = Step("resolve", "resolve", {
        **{k: model[k] for k in ("source", "package", "hub_id", "trust_remote_code")},
        "random_init": random_init, "path": path, "task": known["task"],
        "model_class": known["model_class"], "digest": known["digest"]})
    steps = [resolve]
    finals: dict[str, str] = {}
    fp32s: dict[str, str] = {}
    for graph, spec in known["graphs"].items():
        chain, finals[graph], fp32s[graph] = _chain(config, graph, spec)
        steps += chain
    if len(finals) > 1 or roles.kind_of(finals) is not roles.Kind.SINGLE:
        delivering, deliverable_id = lower_generation.deliverable(config, known, steps, finals,
                                                                  _ep(config))
        steps += delivering
    else:
        deliverable_id = next(iter(finals.values()))
    steps += lower_generation.loop_step(config, known)
    if config["eval"]["kind"] != "none":
        steps += _eval(config, known, deliverable_id, fp32s)
    symbolic_sources = [{"step": resolve.id, "reason": known["symbolic"]}] \
        if known["symbolic"] else []
    if known.get("dataset") is not None and known["dataset"].kind == "symbolic":
        symbolic_sources.append({"step": "eval", "reason": f"eval.dataset.path "
                                 f"{known['dataset'].where!r} is not on this machine"})
    weights = None if known["symbolic"] else remembered(
        "weights", (known["digest"], known["where"]),
        lambda: footprint.read(known["info"], known["where"]))
    return Plan(config=config, config_digest=config_digest(config), steps=steps,
                deliverable=deliverable_id, symbolic_sources=symbolic_sources,
                weights=weights, cuttable=known["modality"] == T.CAUSAL)


def _chain(config: dict[str, Any], graph: str,
           spec: dict[str, Any] | None) -> tuple[list[Step], str, str]:
    """One graph's steps (export and tag for a torch source, normalize, optimize, quantize,
    compile, the verify and perf sinks, perf.module's steps), its deliverable's id and its
    fp32 graph's."""
    def sid(op: str) -> str:
        return graph_step_id(graph, op)

    steps: list[Step] = []
    chain = "resolve"
    if spec is not None:
        ex = config["export"]
        steps.append(Step(sid("export"), "export", {
            "exporter": ex["exporter"], "opset": ex["opset"],
            "graph": None if graph == "model" else graph, "inputs": spec["inputs"],
            "outputs": spec["outputs"], "hierarchy": ex["hierarchy"], "report": ex["report"],
            "torch_modules": sorted(ex["torch_modules"]),
            **({"dynamic": True} if spec.get("dynamic") else {}),
            **({"upcast": spec["upcast"]} if spec.get("upcast") else {}),
            **({"fallback": f} if (f := ex.get("fallback")) not in (None, ex["exporter"]) else {})},
            {"model": "resolve"}))
        chain = sid("export")
        if ex["hierarchy"]:
            steps.append(Step(sid("tag"), "tag", {}, {"model": chain, "hierarchy": chain}))
            chain = sid("tag")
        if spec.get("fixed"):
            steps.append(Step(sid("fix_shapes"), "fix_shapes", {"inputs": spec["inputs"]},
                              {"model": chain}))
            chain = sid("fix_shapes")
    steps.append(Step(sid("normalize"), "normalize", {}, {"model": chain}))
    steps.append(Step(sid("optimize"), "optimize", {"flags": sorted(config["optim"]["flags"])},
                      {"model": sid("normalize")}))
    fp32 = chain = sid("optimize")
    steps += _quantize_and_compile(config, chain, sid, spec)
    deliverable = steps[-1].id
    steps += _sinks(config, deliverable, fp32, sid)
    return steps + module_perf.steps(config, steps, deliverable, sid), deliverable, fp32


def _quantize_and_compile(config: dict[str, Any], chain: str, sid: Any,
                          spec: dict[str, Any] | None = None) -> list[Step]:
    quant, target = config["quant"], config["target"]
    declared = of_config(target)
    steps = []
    if quant["kind"] != "none":
        mixed_precision.check(quant)
        extra = mixed_precision.step_params(config, declared.qdq.search_margin)
        inputs = {"model": chain, "source": "resolve"}
        if mixed_precision.needs_hierarchy(extra):
            inputs["hierarchy"] = _hierarchy_source(config, sid)
        steps.append(Step(sid("quantize"), "quantize", {
            **{k: quant[k] for k in ("kind", "weight_type", "activation_type", "per_channel",
                                     "symmetric", "calibration")},
            "profile": declared.name, **_optional(quant), **extra}, inputs))
        chain = sid("quantize")
    parts = (spec or {}).get("parts", 1)
    if parts > 1:
        steps.append(Step(sid("split"), "split", {"parts": parts}, {"model": chain}))
        chain = sid("split")
    if not declared.compiles:
        return steps
    params = {"target": declared.name, "ep": target["ep"], "backend": target["backend"],
              "embed_context": target["embed_context"], "cpu_fallback": target["cpu_fallback"],
              "provider_options": provider_options(config)}
    if parts == 1:
        return [*steps, Step(sid("compile"), "compile", params, {"model": chain})]
    for part in range(parts):  # one step and key per part: a failed part re-runs alone
        steps.append(Step(f"{sid('compile')}.{part}", "compile", {**params, "part": part},
                          {"model": chain}))
        chain = steps[-1].id
    return steps


def _optional(quant: dict[str, Any]) -> dict[str, Any]:
    """quant.block_size and quant.layerwise as step params when set (plans keep their keys)."""
    from planner.core.ops import bits
    from planner.errors import ConfigError

    found = {k: quant[k] for k in ("layerwise",) if quant.get(k, "auto") != "auto"}
    size = quant.get("block_size")
    if size is not None and bits(quant["weight_type"]) != 4:
        raise ConfigError(f"quant.block_size={size}: blocks are for 4-bit weights, and "
                          f"quant.weight_type is {quant['weight_type']}",
                          "use quant=w4a16, or set quant.block_size=null")
    return found if size is None else {**found, "block_size": size}


def _hierarchy_source(config: dict[str, Any], sid: Any) -> str:
    """The export step whose hierarchy sidecar names the modules quant.overrides selects."""
    from planner.errors import ConfigError

    if config["model"]["source"] == "onnx_file" or not config["export"]["hierarchy"]:
        raise ConfigError("quant.overrides: a modules selector (or quant.search=auto) needs the "
                          "export's module hierarchy, which this build has none of "
                          "(an ONNX file, or export.hierarchy=false); select by op_types or "
                          "nodes, or set export.hierarchy=true")
    return sid("export")


def provider_options(config: dict[str, Any]) -> dict[str, Any]:
    """The target's provider options, plus what the precision needs on it (fp16 on HTP needs
    enable_htp_fp16_precision with a soc_model, measured; so do the float nodes of a mixed QDQ
    graph)."""
    target, quant = config["target"], config["quant"]
    options = dict(target["provider_options"])
    if quant["kind"] == "fp16" or mixed_precision.runs_float(quant):
        options = {**target.get("fp16_provider_options", {}), **options}
    return dict(sorted(options.items()))


def _eval(config: dict[str, Any], known: dict[str, Any], deliverable: str,
          fp32s: dict[str, str]) -> list[Step]:
    """The eval sink: the task's metric on the deliverable, the fp32 graph(s) and PyTorch.
    A model of several graphs is compared as a whole: its fp32 graphs are bundled too."""
    from planner.errors import ConfigError

    ev, ds = config["eval"], known["dataset"]
    task = known["task"]
    if config["model"]["source"] == "onnx_file":
        raise ConfigError("eval=task: an ONNX file has no PyTorch model to be the baseline; "
                          "build from its checkpoint (model=local_hf model.path=DIR) or set "
                          "eval=none")
    if task is None and known["symbolic"]:  # reviewed without the checkpoint: said so
        task = SYMBOLIC
    elif task not in evaluation.EVAL:
        raise ConfigError(f"eval=task: modelplan has no task metric for {task}; set eval=none")
    host = reference_target()  # the fp32 graphs run on the host CPU
    runs_on = {"ep": host.ep, "backend": host.backend,
               "provider_options": dict(host.provider_options)}
    steps = lower_generation.reference_bundle(config, known, fp32s, _ep(config), runs_on)
    reference = steps[0].id if steps else next(iter(fp32s.values()))
    data = ev["dataset"]
    steps.append(Step("eval", "eval", {
        "task": task, "metric": ev["metric"] or SYMBOLIC if task == SYMBOLIC else
        evaluation.verdict_metric(task, ev["metric"]),
        "max_drop": ev["max_drop"], "dataset": ds.where, "dataset_kind": ds.kind,
        "dataset_name": data["name"], "split": data["split"], "samples": data["samples"],
        "shuffle": data["shuffle"], "seed": data["seed"],
        **({"columns": dict(sorted(data["columns"].items()))} if task == SYMBOLIC else
           evaldata.step_columns(task, data, ds.kind, ds.where, known["info"])),
        "dataset_digest": ds.digest,
        **_ep(config)},
        {"candidate": deliverable, "reference": reference, "source": "resolve"}))
    return steps


def _ep(config: dict[str, Any]) -> dict[str, Any]:
    target = config["target"]
    return {"ep": target["ep"], "backend": target["backend"],
            "provider_options": provider_options(config)}


def _sinks(config: dict[str, Any], deliverable: str, fp32: str, sid: Any) -> list[Step]:
    verify, perf = config["verify"], config["perf"]
    ep = _ep(config)
    steps = []
    if verify["metric"] != "none":
        steps.append(Step(sid("verify"), "verify", {
            **{k: verify[k] for k in ("metric", "reference", "threshold", "samples")}, **ep},
            {"candidate": deliverable, "reference": fp32, "source": "resolve"}))
    if perf["iterations"] > 0:
        steps.append(Step(sid("perf"), "perf", {"iterations": perf["iterations"],
                                                "warmup": perf["warmup"],
                                                "profile_runs": perf["profile_runs"], **ep},
                          {"model": deliverable}))
    return steps
