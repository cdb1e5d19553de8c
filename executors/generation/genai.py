"""onnxruntime-genai's `genai_config.json` for a causal LM's bundle, written by lm_bundle and
read back by `modelplan generate`: one description of the bundle that both runners read.

A bundle whose token graph has a free past (the CPU's: `past_key_values.{i}.*` of any length
in, `present.{i}.*` = past + new out, any number of new tokens) is genai's plain decoder
(`model.type: "decoder"`): genai feeds the whole prompt at once on an empty past, then one
token at a time, and grows its cache itself. A bundle of fixed shapes on a target that runs
its graphs as they are (the CPU) gets `genai_model.onnx`, genai's windowed uint8 cache over its
prompt and token graphs (executors/generation/windowed.py), run by genai's plain decoder with a
sliding window. One whose graphs are compiled gets genai's decoder pipeline over its compiled
stages (executors/generation/stages.py: the graphs over genai's cache of fixed length), which
genai runs on the target's EP. Where neither can be made (host layers, parts) it is described
as genai's decoder pipeline over its own graphs (and its host layers), which genai 0.18 reads
but does not run
(docs/generation.md says why)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from executors.generation import stages
from planner.core.targets import of_params
from planner.models.generation import (
    GENAI_DECODER,
    GENAI_PIPELINE,
    GENAI_SECTION,
    HOST_LAYERS,
    heads_and_width,
    shape_of,
    uniform_cache,
)
from planner.models.roles import CACHE, ROLES, prompt_and_token

GENAI_CONFIG = "genai_config.json"


def free_past(specs: list[dict[str, Any]], model: Path) -> bool:
    """Whether a token graph's past axis is free (checked on the graph itself)."""
    import onnx

    past = next((s["name"] for s in specs if CACHE.is_past(s["name"])), None)
    if past is None or model.suffix != ".onnx" or not model.is_file():
        return False
    graph = onnx.load(str(model), load_external_data=False).graph
    value = next((v for v in graph.input if v.name == past), None)
    dims = value.type.tensor_type.shape.dim if value is not None else ()
    return len(dims) == 4 and bool(dims[2].dim_param)


def config_for(config: dict[str, Any], bundle: dict[str, Any], generation: dict[str, Any],
               folder: Path) -> dict[str, Any] | None:
    """genai_config.json for a causal LM's bundle (`bundle`: its bundle.json) in `folder`:
    the plain decoder over its token graph where that graph has a free past, else the decoder
    pipeline over its graphs; None where genai cannot describe its cache (`describable`), or
    some layers keep a recurrent state, for which genai's decoder has no input."""
    graphs = bundle["graphs"]
    if any(CACHE.is_state(s["name"]) for g in graphs.values() for s in g["inputs"]):
        return None
    _, token = prompt_and_token(graphs)
    if config and not describable(config, graphs[token]["inputs"]):
        return None
    shape = shape_of(config) if config else None
    layers = shape.layers if shape else CACHE.layers([s["name"] for s in graphs[token]["inputs"]])
    eos = generation.get("eos_token_id", config.get("eos_token_id"))
    context = bundle["context_length"]  # tokens at positions 0 .. context - 1
    plain = free_past(graphs[token]["inputs"], folder / graphs[token]["model"])
    heads, width = heads_and_width(config)
    decoder: dict[str, Any] = {
        "num_hidden_layers": layers, "head_size": shape.head_dim if shape else None,
        "num_key_value_heads": shape.kv_heads if shape else None,
        "num_attention_heads": heads, "hidden_size": width,
        "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                   "position_ids": "position_ids", **cache_names("past", CACHE.past)},
        "outputs": {"logits": "logits", **cache_names("present", CACHE.present)},
        "session_options": {"provider_options": providers(bundle)}}
    made = bundle.get("genai") or {}  # genai's graphs over the bundle's own:
    windowed = made if "model" in made else None  # the windowed graph (windowed.py)
    staged = made if "stages" in made else None   # or the compiled stages (stages.py)
    if staged:
        context = staged["context_length"]  # the slots of the buffers genai passes through
        _over_stages(bundle, decoder, folder)
    elif windowed:
        decoder["filename"] = windowed["model"]
        context = windowed["context_length"]  # the decode graph's slots and its token
        # the prompt in one window of the prefill length, left-padded; genai keeps the cache
        decoder["sliding_window"] = {"window_size": windowed["window"],
                                     "pad_value": windowed["cache"]["zero_point"],
                                     "alignment": "right", "slide_key_value_cache": True,
                                     "slide_inputs": True}
    elif plain:
        decoder["filename"] = graphs[token]["model"]
    else:
        decoder["pipeline"] = [_stages(bundle, folder)]
        # the prompt in chunks of the prefill graph's length, padded; a cache of fixed length
        decoder["sliding_window"] = {"window_size": bundle["prefill_length"],
                                     "pad_value": _pad(config, eos), "alignment": "right",
                                     "slide_key_value_cache": False}
    return {"model": {
        "type": GENAI_DECODER if plain or windowed else GENAI_PIPELINE,
        "bos_token_id": generation.get("bos_token_id", config.get("bos_token_id")),
        "eos_token_id": eos, "pad_token_id": _pad(config, eos),
        "context_length": context, "vocab_size": shape.vocab if shape else None,
        "decoder": decoder},
        # the stages give back the buffers they read: genai passes one through them
        "search": {**greedy_search(context),
                   **({"past_present_share_buffer": True} if staged else {})}}


def _over_stages(bundle: dict[str, Any], decoder: dict[str, Any], folder: Path) -> None:
    """`decoder` made genai's decoder pipeline over the bundle's compiled stages
    (executors/generation/stages.py): a cache of fixed length genai passes through them, one
    buffer per layer's keys and values."""
    for field in ("inputs", "outputs"):
        del decoder[field]
    prompt, _ = prompt_and_token(bundle["graphs"])
    graph = bundle["graphs"][prompt]
    ends = (next(s["name"] for s in graph["inputs"] if s["name"] in (stages.IDS, stages.EMBEDS)),
            next(s["name"] for s in graph["outputs"] if not s["name"].startswith(CACHE.present)))
    staged = bundle["genai"]
    decoder |= pipeline_section(decoder["num_hidden_layers"], staged["stages"],
                                staged["window"], decoder["session_options"], ends,
                                host_stages(bundle, folder))


def pipeline_section(layers: int, files: dict[str, str], window: int, session: dict[str, Any],
                     ends: tuple[str, str] = (stages.IDS, "logits"),
                     host: tuple[dict[str, Any], dict[str, Any]] = ({}, {})) -> dict[str, Any]:
    """genai_config.json's decoder fields that name the stages (`files`: stage -> its file),
    their inputs and outputs (`ends`: the graphs' token input and first output: the ids and
    the logits, or the host's embeddings and the hidden states for its head), the host's
    stages before and after them (`host`), and the sliding window of the prompt graph's
    length."""
    past = [f"{CACHE.past}.{i}.{p}" for i in range(layers) for p in CACHE.parts]
    io = {"inputs": [ends[0], stages.PAST_SEQ_LEN, stages.TOTAL_SEQ_LEN, *past],
          "outputs": [ends[1], *(CACHE.present_of(n) for n in past)]}
    prompt, token = stages.STAGES
    return {
        "inputs": {"input_ids": stages.IDS, "past_sequence_length": stages.PAST_SEQ_LEN,
                   "total_sequence_length": stages.TOTAL_SEQ_LEN,
                   **cache_names("past", CACHE.past)},
        "outputs": {"logits": "logits", **cache_names("present", CACHE.present)},
        # the prompt in windows of the prompt graph's length, from the left; the buffers stay
        "sliding_window": {"window_size": window, "pad_value": 0, "alignment": "left",
                           "slide_key_value_cache": False},
        "pipeline": [{**host[0],
                      **{name: {"filename": files[name], **io, "session_options": session,
                                "run_on_prompt": name == prompt,
                                "run_on_token_gen": name == token} for name in stages.STAGES},
                      **host[1]}]}


def describable(config: dict[str, Any], specs: list[dict[str, Any]]) -> bool:
    """Whether genai's decoder, which gives every layer's keys and values one `head_size` and
    `num_key_value_heads` and every one of `num_hidden_layers` a cache, describes this cache:
    not where config.json's layers differ in heads or width (Gemma 4's global layers), keys
    and values differ (a latent attention's), some layers have none (Gemma 3n's shared ones),
    or the token graph's buffers (`specs`: their shapes are those the model filled at export)
    are not config.json's."""
    shape = shape_of(config)
    one = (shape.kv_heads, shape.head_dim)
    if not uniform_cache(config):
        return False
    past = [s for s in specs if CACHE.is_past(s["name"])]
    return CACHE.layers([s["name"] for s in past]) == shape.layers and \
        all((s["shape"][1], s["shape"][3]) == one for s in past)


def cache_names(field: str, prefix: str) -> dict[str, str]:
    """genai's `<field>_key_names` and `<field>_value_names`: the pattern of modelplan's cache
    tensors `<prefix>.<layer>.key` / `.value` for each layer."""
    key, value = CACHE.parts
    return {f"{field}_key_names": f"{prefix}.%d.{key}",
            f"{field}_value_names": f"{prefix}.%d.{value}"}


def greedy_search(context: int) -> dict[str, Any]:
    """genai's search section for greedy decoding up to `context` tokens, the past and present
    caches apart (modelplan's graphs give back past + new)."""
    return {"do_sample": False, "num_beams": 1, "max_length": context, "min_length": 0,
            "past_present_share_buffer": False}


def _pad(config: dict[str, Any], eos: Any) -> Any:
    if config.get("pad_token_id") is not None:
        return config["pad_token_id"]
    return eos[0] if isinstance(eos, list) else eos


def _stages(bundle: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The pipeline's stages in order: the host's layers that run before the graphs (the
    embeddings), each graph (on the prompt, on each token), the host's layers after them (the
    head, genai's lm_head); each with its file, inputs and outputs."""
    graphs = bundle["graphs"]
    before, after = host_stages(bundle, folder)

    def io(graph: str, key: str) -> list[str]:
        return [s["name"] for s in graphs[graph][key]]

    return {**before,
            **{g: {"filename": graphs[g]["model"], "inputs": io(g, "inputs"),
                   "outputs": io(g, "outputs"), "run_on_prompt": ROLES[g].prompt_stage,
                   "run_on_token_gen": ROLES[g].token_stage} for g in graphs},
            **after}


def host_stages(bundle: dict[str, Any], folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The host's layers (export.on_host) as pipeline stages on the CPU EP, on the prompt and
    on each token: those before the graphs (the embeddings), those after them (the head,
    genai's lm_head)."""
    import onnx

    host = bundle.get("host", {})

    def layer(name: str) -> dict[str, Any]:
        graph = onnx.load(str(folder / host[name]), load_external_data=False).graph
        outputs = [v.name for v in graph.output]
        return {"filename": host[name], "inputs": [v.name for v in graph.input],
                "outputs": outputs, "session_options": {"provider_options": []},
                "run_on_prompt": True, "run_on_token_gen": True,
                "is_lm_head": "logits" in outputs}

    return ({n: layer(n) for n in HOST_LAYERS[:1] if n in host},
            {n: layer(n) for n in HOST_LAYERS[1:] if n in host})


def providers(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    """The EP the bundle was built for, as genai names it (none: the CPU), with its backend
    (genai 0.18 on the QNN plugin EP: "Could not determine default backend path for device"
    without it)."""
    runs = bundle["runs_on"]
    target = of_params(runs)
    if target.reference:
        return []
    backend = {target.session.backend_option: target.backend} \
        if target.session.backend_option and target.backend else {}
    return [{target.ep: {**backend, **{k: str(v) for k, v in
                                       (runs.get("provider_options") or {}).items()}}}]


def read(folder: Path, bundle: dict[str, Any]) -> dict[str, Any] | None:
    """A causal LM bundle's genai_config.json (None when it has none), checked against its
    bundle.json: the graph files it names are the bundle's, its context is the bundle's."""
    from executors.generation.bundle import BundleError

    path = folder / GENAI_CONFIG
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
        model = config["model"]
        decoder = model[GENAI_SECTION]
        named = [decoder["filename"]] if "filename" in decoder else \
            [stage["filename"] for stages in decoder["pipeline"] for stage in stages.values()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError,
            AttributeError) as exc:
        raise BundleError(f"{path} is not an onnxruntime-genai config of a language model "
                          f"({type(exc).__name__}: {exc}); rebuild the bundle with modelplan "
                          "run") from exc
    files = {e["model"] for e in bundle["graphs"].values()} | set(bundle.get("host", {}).values())
    windowed = bundle.get("genai")
    if windowed:
        files |= set(windowed["stages"].values()) if "stages" in windowed else \
            {windowed["model"]}
    context = windowed["context_length"] if windowed else bundle["context_length"]
    unknown = [f for f in named if f not in files]
    if unknown or model.get("context_length") != context:
        said = f"names {unknown[0]!r}, which is not one of its graphs" if unknown else \
            f"says context_length {model.get('context_length')!r}, and its graphs hold " \
            f"{context} tokens"
        raise BundleError(f"{path} {said} (bundle.json); rebuild the bundle with modelplan run")
    return config


def eos_ids(config: dict[str, Any]) -> set[int]:
    """The end-of-sequence ids genai_config.json names."""
    from executors.generation.bundle import token_ids

    return token_ids(config["model"].get("eos_token_id"))
