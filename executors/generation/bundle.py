"""A published generation bundle (the lm_bundle or bundle step's folder) opened for generating:
`bundle.json` read and checked, its graphs opened as sessions on the EP they were built for
(`runs_on`), a causal LM's graphs as one runner, and its end tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from executors.generation.decoder_only import Forward, LMGraphs, PrefixGraph
from executors.runtime.adapters import adapter, host_providers
from planner.models.roles import CACHE, Kind, kind_of, prompt_and_token, uncached_graph

BUNDLE = "bundle.json"


class BundleError(ValueError):
    """A folder that is not a generation bundle this version reads: one line and a fix."""


def read(folder: Path) -> dict[str, Any]:
    """bundle.json of a generation bundle, checked: the graphs of a kind that generates, each
    graph's file and input specs, and the EP they were built for."""
    path = folder / BUNDLE
    if not path.is_file():
        raise BundleError(f"{folder} has no {BUNDLE}; give the published folder of a language "
                          "model's or an encoder-decoder model's build (modelplan run prints "
                          "it as Deliverable)")
    try:
        described = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path} is not JSON ({exc}); rebuild the bundle with modelplan "
                          "run") from exc
    graphs = described.get("graphs") if isinstance(described, dict) else None
    if not isinstance(graphs, dict) or "runs_on" not in described or \
            kind_of(graphs) is Kind.SINGLE:
        raise BundleError(f"{path} is neither a language model's nor an encoder-decoder "
                          "model's bundle of this version (no runs_on, or no prefill or "
                          "encoder graph); rebuild it with modelplan run")
    for graph, entry in graphs.items():
        model = entry.get("model") if isinstance(entry, dict) else None
        if not isinstance(model, str) or not isinstance(entry.get("inputs"), list) or \
                not (folder / model).is_file():
            raise BundleError(f"{path}: graph {graph!r} names no model file that is in the "
                              f"folder ({model!r}); rebuild the bundle with modelplan run")
    if kind_of(graphs) is Kind.DECODER_ONLY and uncached_graph(graphs):
        _check_context(path, described)
    elif kind_of(graphs) is Kind.DECODER_ONLY:
        _check_lengths(path, described)
    return described


def _check_context(path: Path, described: dict[str, Any]) -> None:
    """A prefix graph's bundle: a positive context, the graph's own length where it is fixed."""
    graph = uncached_graph(described["graphs"])
    ids = next((s for s in described["graphs"][graph]["inputs"]
                if isinstance(s, dict) and s.get("name") == "input_ids"), None)
    width = ids["shape"][1] if ids and isinstance(ids.get("shape"), list) and \
        len(ids["shape"]) == 2 else None
    context = described.get("context_length")
    if ids is None or not isinstance(context, int) or isinstance(context, bool) or \
            context < 1 or (isinstance(width, int) and width != context):
        raise BundleError(f"{path}: context_length {context!r} is not the {graph} graph's "
                          f"input_ids length ({width!r}); rebuild the bundle with modelplan "
                          "run")


def _check_lengths(path: Path, described: dict[str, Any]) -> None:
    """A causal LM bundle's lengths: positive, and the ones its graphs were built with; and
    a prompt graph that reads the cache as the token graph does (a bundle built before the
    prompt was read a window at a time has one that reads no past)."""
    prompt, token = prompt_and_token(described["graphs"])
    reads = [any(isinstance(s, dict) and CACHE.is_past(str(s.get("name"))) for s in
                 described["graphs"][g]["inputs"]) for g in (prompt, token)]
    if reads == [False, True]:
        raise BundleError(f"{path}: its {prompt} graph reads no key/value cache (a bundle "
                          "built before prompts were read a window at a time over the cache); "
                          "rebuild the bundle with modelplan run")
    mask = next((s for s in described["graphs"][token]["inputs"]
                 if isinstance(s, dict) and s.get("name") == "attention_mask"), None)
    slots = mask["shape"][1] - 1 if mask and isinstance(mask.get("shape"), list) and \
        len(mask["shape"]) == 2 and isinstance(mask["shape"][1], int) else None
    for key in ("prefill_length", "context_length"):
        value = described.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BundleError(f"{path}: {key} is {value!r}, not a positive number of tokens; "
                              "rebuild the bundle with modelplan run")
    if slots is None or described["context_length"] != slots or \
            described["prefill_length"] > slots:
        raise BundleError(f"{path}: context_length {described['context_length']} and "
                          f"prefill_length {described['prefill_length']} do not match its "
                          f"{token} graph's cache ({slots} slots); rebuild the bundle with "
                          "modelplan run")


def kind(described: dict[str, Any]) -> Kind:
    return kind_of(described["graphs"])


def session_forward(session: Any) -> Forward:
    names = [o.name for o in session.get_outputs()]
    return lambda feed: dict(zip(names, session.run(names, feed), strict=True))


def forwards(folder: Path, described: dict[str, Any], target: Any,
             provider_options: dict[str, Any], cache_dir: Path | None = None,
             graphs: list[str] | None = None) -> dict[str, Forward]:
    """Sessions on `target` for the bundle's graphs (all, or `graphs`), as forwards."""
    runtime = adapter(target)
    out = {}
    for g, e in described["graphs"].items():
        if graphs is not None and g not in graphs:
            continue
        try:
            session = runtime.step_session(folder / e["model"], target, provider_options,
                                           cache_dir)[0]
        except Exception as exc:  # ONNX Runtime's own errors derive from Exception alone
            said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BundleError(f"{folder}: its {g} graph does not load ({said}); rebuild the "
                              "bundle with modelplan run") from exc
        out[g] = session_forward(session)
    return out


def lm_graphs(folder: Path, described: dict[str, Any], target: Any,
              provider_options: dict[str, Any], cache_dir: Path | None = None
              ) -> LMGraphs | PrefixGraph:
    """A causal LM's bundle as one runner: its prompt graph, its token graph, its host layers;
    or its one graph on the whole prefix (a forward that keeps no cache)."""
    graphs = described["graphs"]
    whole = uncached_graph(graphs)
    if whole:
        opened = forwards(folder, described, target, provider_options, cache_dir, [whole])
        return PrefixGraph(opened[whole], _token_axis(folder / graphs[whole]["model"]),
                           described["context_length"])
    prompt, token = prompt_and_token(graphs)
    opened = forwards(folder, described, target, provider_options, cache_dir, [prompt, token])
    return LMGraphs(opened[prompt], opened[token], graphs[prompt]["inputs"],
                    graphs[token]["inputs"], host_forwards(folder, described))


def _token_axis(path: Path) -> int | None:
    """The length a graph's token inputs are fed at: their token axis's where an input fixes
    it (a forward that ignores its mask leaves the mask's axis as traced), None where all are
    free (fed unpadded)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    fixed = [d.dim_value for i in graph.input if i.name in ("input_ids", "attention_mask")
             for d in i.type.tensor_type.shape.dim[1:2] if d.HasField("dim_value")]
    return max(fixed) if fixed else None


def host_forwards(folder: Path, described: dict[str, Any]) -> dict[str, Forward]:
    """Sessions on the host CPU for the layers a bundle places there (export.on_host)."""
    import onnxruntime as ort

    return {layer: session_forward(ort.InferenceSession(str(folder / name),
                                                        providers=host_providers()))
            for layer, name in described.get("host", {}).items()}


def eos_ids(folder: Path) -> set[int]:
    """The end-of-sequence ids a bundle's (or checkpoint's) generation config names."""
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if eos is not None:
                return token_ids(eos)
    return set()


def token_ids(value: int | list[int] | None) -> set[int]:
    """A config's token id field (one id or a list of them) as a set of ids."""
    if value is None:
        return set()
    return {int(t) for t in value} if isinstance(value, list) else {int(value)}
