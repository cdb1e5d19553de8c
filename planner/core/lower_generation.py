"""The steps a generating model's graphs get beyond their chains, by their roles
(planner/models/roles.py): a causal LM's parts, shared context, host layers and bundle; an
encoder-decoder's bundle and loop graph; the generation check on either bundle; and what the
config may not ask of a model that does not generate that way."""

from __future__ import annotations

from typing import Any

from planner.core.plan import Step
from planner.core.targets import of_config
from planner.errors import ConfigError
from planner.models import automap, forwards, generation, roles, seq2seq
from planner.models import tasks as T


def check_on_host(ex: dict[str, Any], modality: str, info: dict[str, Any]) -> list[str]:
    """export.on_host, checked: a language model's embeddings and/or head on the host CPU."""
    _head_on_host(info, ex["on_host"])
    if ex["on_host"] and modality != T.CAUSAL:
        raise ConfigError(f"export.on_host: {ex['on_host']} places a language model's "
                          f"embeddings or head on the host, and this is a {modality} model; "
                          "set export.on_host=[]")
    return sorted(ex["on_host"])


def checked_modality(task: str, info: dict[str, Any], model_class: str | None,
                     shapes: dict[str, Any] | None = None) -> str:
    """The modality the build's graphs take. A causal LM's are a prefill and a decode over its
    key/value cache; a class whose forward returns none (OpenAI GPT's, RWKV's, Reformer's hash
    buckets: read from transformers' source, whatever its config's `use_cache` says), or any
    with export.shapes.decoder_cache=false (in `shapes`: a cache the graphs cannot carry), is
    built as one graph run on the whole prefix for each new token (causal-uncached). One
    whose generation appends tokens to the prompt before each forward (XLM's mask token,
    XLNet's dummy token) is refused here, in one line, rather than by its generation check."""
    modality = T.task_modality(task, info, model_class)
    if modality != T.CAUSAL:
        return modality
    cache = (shapes or {}).get("decoder_cache")
    model_type = str(info.get("model_type", ""))
    cls = model_class or automap.causal_lm_class(model_type)
    cached = None if not cls else forwards.returns_cache(model_type, cls)
    if cache is True and cached is False:
        raise ConfigError(f"export.shapes.decoder_cache=true: {cls}'s forward returns no "
                          f"key/value cache (model_type {model_type!r}), so there is none for "
                          "a decode graph to step over; set export.shapes.decoder_cache=null")
    if cache is not False and (not cls or cached is not False):
        return modality
    if not cls or not forwards.extends_prompt(model_type, cls):
        return T.CAUSAL_UNCACHED
    raise ConfigError(
        f"model: {cls} (model_type {model_type!r}) keeps no key/value cache and generates by "
        "appending tokens of its own to the prompt before each forward "
        "(its prepare_inputs_for_generation), so no graph over the prompt's tokens reads the "
        "next token at the prompt's end; modelplan cannot build it for text generation: "
        "choose a checkpoint of a causal LM that predicts at the prompt's last token")


def _head_on_host(info: dict[str, Any], on_host: list[str]) -> None:
    """The host's head is the model's output embeddings: a model that scales or caps its
    logits after them would lose that (gemma2's softcapping, granite's scaling)."""
    text = info.get("text_config") or info
    scaled = [k for k in ("final_logit_softcapping", "logits_scaling")
              if text.get(k) not in (None, 1, 1.0)]
    if "head" in on_host and scaled:
        raise ConfigError(f"export.on_host: the head on the host is the model's output "
                          f"embeddings alone, and this model's config.json sets {scaled[0]} "
                          "after them; keep the head on the target (export.on_host=[embeddings])")


def free_past_graphs(config: dict[str, Any], modality: str,
                     graphs: dict[str, Any]) -> list[str]:
    """The graphs over a cache that are exported with a free past: a causal LM's token graph on
    a target that runs any shape (the CPU), traced whole (TorchScript, one part, no host
    layers). It reads a past of any length and any number of new tokens, and gives back past
    and new entries together, which is onnxruntime-genai's decoder layout: genai runs the
    bundle on it at any prompt length (`export.shapes.dynamic=false` keeps it fixed)."""
    ex = config["export"]
    if modality != T.CAUSAL or not _any_shape_traced_whole(config) or ex["on_host"] or \
            ex["parts"] not in (None, 1):
        return []
    return [g for g in graphs if roles.ROLES[g].reads_cache and roles.ROLES[g].token_stage]


def genai_encoder_decoder(config: dict[str, Any], modality: str, info: dict[str, Any],
                          graphs: dict[str, Any]) -> dict[str, Any]:
    """An encoder-decoder that onnxruntime-genai runs (Whisper), with the cached decoder, built
    in fp32 for a target that runs any shape (the CPU) and traced whole: its graphs in genai's
    layout (planner/models/generation.py `genai_layout`), which modelplan's loop runs too
    (`export.shapes.dynamic=false` keeps the static cache and the cross graph). A quantized
    build keeps them too: quantized in genai's layout it lost accuracy the static cache does
    not (docs/generation.md)."""
    if info.get("model_type") not in generation.GENAI_ENCODER_DECODERS or \
            config["quant"]["kind"] != "none" or roles.CROSS not in graphs or \
            not _any_shape_traced_whole(config) or config["export"]["generate_loop"]:
        return graphs
    return seq2seq.genai_layout(graphs)


def _any_shape_traced_whole(config: dict[str, Any]) -> bool:
    """A build whose graphs may take any shape (a target that does not compile, shapes not
    fixed by export.shapes.dynamic=false), traced whole by TorchScript: genai's free-past
    layouts apply to it."""
    ex = config["export"]
    return not of_config(config["target"]).compiles and ex["exporter"] == "torchscript" and \
        ex["shapes"]["dynamic"] is not False


def parts(config: dict[str, Any], info: dict[str, Any], modality: str) -> int | None:
    """A causal LM's parts per graph (planner/models/generation.py says how many); None for
    other models, which export.parts may not cut."""
    from planner.core.ops import bits

    ex = config["export"]
    if modality != T.CAUSAL:
        if ex["parts"] is not None:
            raise ConfigError(f"export.parts: {ex['parts']} parts cut a language model's "
                              f"graphs at their decoder layers, and this is a {modality} "
                              "model; set export.parts=null")
        return None
    quant = config["quant"]
    weight = 16 if quant["kind"] == "fp16" else 32 if quant["kind"] == "none" else \
        bits(quant["weight_type"])
    table = 16 if quant["kind"] == "fp16" else 32 if quant["kind"] == "none" else \
        bits(quant["activation_type"])
    return generation.parts(info, ex["parts"], weight, table,
                            of_config(config["target"]).compiles)


def deliverable(config: dict[str, Any], known: dict[str, Any], steps: list[Step],
                finals: dict[str, str], ep: dict[str, Any]) -> tuple[list[Step], str]:
    """The steps that deliver a model of several graphs together, and the deliverable's id."""
    if roles.uncached_graph(finals):  # one graph on the whole prefix: no context to share
        bundle = _uncached_bundle("bundle", config, known, finals, ep)
        return [bundle, *_generation_check(config, bundle.id, ep)], bundle.id
    if roles.kind_of(finals) is roles.Kind.DECODER_ONLY:
        made = lm_bundle(config, known, finals, ep, _shared_context(config, steps, finals, ep),
                         _genai_stages(config, known, steps, finals, ep))
        return made, "bundle"
    bundle = Step("bundle", "bundle", {"graphs": list(finals), **ep},
                  {**finals, "source": "resolve"} if known["graphs"].get(roles.ENCODER)
                  else dict(finals))
    return [bundle, *_generation_check(config, bundle.id, ep)], bundle.id


def _uncached_bundle(sid: str, config: dict[str, Any], known: dict[str, Any],
                     finals: dict[str, str], ep: dict[str, Any]) -> Step:
    """The bundle of a causal LM's one graph on the whole prefix (it keeps no cache)."""
    _, context = generation.lengths(known["info"], config["export"]["shapes"])
    return Step(sid, "uncached_bundle", {"graphs": list(finals), "context_length": context,
                                         **ep}, {**finals, "source": "resolve"})


def loop_step(config: dict[str, Any], known: dict[str, Any]) -> list[Step]:
    """export.generate_loop's step (an encoder-decoder's greedy decoding as one graph)."""
    loop = seq2seq.loop_params(config, known, of_config(config["target"]).compiles)
    return [Step("generate_loop", "generate_loop", loop, {"model": "resolve"})] if loop else []


def _shared_context(config: dict[str, Any], steps: list[Step], finals: dict[str, str],
                    ep: dict[str, Any]) -> list[Step]:
    """On a target that compiles: the two graphs' quantized models compiled into one shared
    context binary (what the compile steps read), for the device to hold the weights once."""
    declared = of_config(config["target"])
    if not declared.compiles or any(s.op == "split" for s in steps):
        return []  # a split graph's parts would share per part: not built yet
    return [Step("share_context", "share_context", {"target": declared.name, **ep},
                 _compiled_from(steps, finals))]


def _genai_stages(config: dict[str, Any], known: dict[str, Any], steps: list[Step],
                  finals: dict[str, str], ep: dict[str, Any]) -> list[Step]:
    """On a target that compiles: the two graphs' quantized models as onnxruntime-genai's
    decoder-pipeline stages over fixed buffers, compiled (executors/generation/stages.py), for
    genai to run the bundle (with the host layers as stages of their own); not for a split
    graph or a cache genai does not describe, nor with export.genai_stages=false (the bundle's
    card then says to run it with `modelplan generate`)."""
    declared = of_config(config["target"])
    inputs = {g: [s["name"] for s in known["graphs"][g]["inputs"]] for g in finals
              if known["graphs"].get(g)}
    if not declared.compiles or not config["export"]["genai_stages"] or \
            len(inputs) != len(finals) or \
            any(s.op == "split" for s in steps) or \
            generation.genai_stages_not(known["info"], inputs) is not None:
        return []
    prefill, _ = generation.lengths(known["info"], config["export"]["shapes"])
    return [Step("genai_stages", "genai_stages", {"target": declared.name, "window": prefill,
                                                  **ep}, _compiled_from(steps, finals))]


def _compiled_from(steps: list[Step], finals: dict[str, str]) -> dict[str, str]:
    """Each graph's model its final step (its compile) reads: the quantized, tagged graph."""
    read = {s.id: s.inputs["model"] for s in steps if s.id in finals.values()}
    return {graph: read[final] for graph, final in finals.items()}


def lm_bundle(config: dict[str, Any], known: dict[str, Any], finals: dict[str, str],
              ep: dict[str, Any], shared: list[Step] = (),
              stages: list[Step] = ()) -> list[Step]:
    """A causal LM's deliverable (both graphs, one folder; the shared context and genai's
    stages beside them), and its generation check."""
    prefill, context = generation.lengths(known["info"], config["export"]["shapes"])
    layers = sorted(config["export"]["on_host"])
    host = [Step("host_layers", "host_layers", {"layers": layers}, {"source": "resolve"})] \
        if layers else []
    inputs = {**finals, "source": "resolve"}
    for role, made in (("shared", shared), ("host", host), ("stages", stages)):  # one each
        if made:
            inputs[role] = made[0].id
    bundle = Step("bundle", "lm_bundle", {"graphs": list(finals), "prefill_length": prefill,
                                          "context_length": context, **ep}, inputs)
    return [*shared, *stages, *host, bundle, *_generation_check(config, bundle.id, ep)]


def _generation_check(config: dict[str, Any], bundle: str, ep: dict[str, Any]) -> list[Step]:
    """verify_generation on a generating model's bundle, when verify runs."""
    verify = config["verify"]
    if verify["metric"] == "none" or verify["new_tokens"] <= 0:
        return []
    return [Step("verify_generation", "verify_generation", {
        "prompts": verify["samples"], "new_tokens": verify["new_tokens"],
        "threshold": verify["threshold"], **ep},
        {"candidate": bundle, "source": "resolve"})]


def reference_bundle(config: dict[str, Any], known: dict[str, Any], fp32s: dict[str, str],
                     ep: dict[str, Any], runs_on: dict[str, Any]) -> list[Step]:
    """eval's reference for a model of several graphs: its fp32 graphs bundled as the
    deliverable is, run on the host CPU (`runs_on`)."""
    if known["modality"] == T.CAUSAL:
        if config["export"]["on_host"]:
            raise ConfigError("eval=task: a language model whose embeddings or head run on "
                              "the host (export.on_host) is not evaluated yet "
                              "(verify_generation compares it with PyTorch); set eval=none or "
                              "export.on_host=[]")
        bundle = next(s for s in lm_bundle(config, known, fp32s, ep) if s.op == "lm_bundle")
        return [Step("reference_bundle", "lm_bundle", {**bundle.params, **runs_on},
                     bundle.inputs)]
    if roles.uncached_graph(fp32s):
        return [_uncached_bundle("reference_bundle", config, known, fp32s, runs_on)]
    if len(fp32s) > 1:
        return [Step("reference_bundle", "bundle", {"graphs": list(fp32s), **runs_on},
                     {**fp32s, "source": "resolve"})]
    return []
