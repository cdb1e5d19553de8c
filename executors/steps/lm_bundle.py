"""lm_bundle: a causal LM's deliverable folder. Its prefill and decode graphs as
`prefill_model.onnx` and `decode_model.onnx` (with whatever their step wrote beside them, such
as an EPContext binary), one `weights/` folder whose blobs are named by content so that the
weights both graphs read are stored once (a tied head reads the embedding table itself:
executors/onnx/tied_head.py), the checkpoint's config, generation config and
tokenizer files, `bundle.json` (each graph's source step and I/O, the cache geometry) and a
`genai_config.json` in onnxruntime-genai's layout. Files are hard links to the store entries
where the file system allows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from executors.generation.bundle import BUNDLE
from executors.onnx import pieces
from executors.onnx.artifacts import MODEL
from executors.onnx.iospecs import io_specs
from executors.onnx.tied_head import tie_file
from executors.run.step_api import StepContext, StepResult
from executors.samples import checkpoint_dir
from executors.store.weights import WEIGHTS, link_or_copy

# what a client needs beside the graphs (tokenizer files of the usual tokenizer families)
CHECKPOINT_FILES = ("config.json", "generation_config.json", "tokenizer.json",
                    "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                    "merges.txt", "vocab.txt", "tokenizer.model", "added_tokens.json",
                    "chat_template.jinja")
STEP_FILES = ("manifest.json", "result.json", "metrics.json")  # the store's, not the model's
DEVICE = "device"  # the shared-context set: both graphs, the weights once, for the device


def run(ctx: StepContext) -> StepResult:
    p = ctx.params
    graphs: dict[str, Any] = {}
    blobs, shared = 0, 0
    for graph in p["graphs"]:
        src_dir = ctx.inputs[graph]
        for f in sorted(src_dir.iterdir()):
            if f.is_file() and f.name not in (*STEP_FILES, pieces.PIECES) \
                    and not f.name.startswith("."):
                link_or_copy(f, ctx.out / f"{graph}_{f.name}")
        split = pieces.index(src_dir)
        if split is not None:  # a split graph: its parts beside the others, weights shared
            _copy_parts(src_dir, ctx.out, graph, split)
        untied = set() if split is not None else tie_file(ctx.out / f"{graph}_{MODEL}", src_dir)
        for blob in sorted((src_dir / WEIGHTS).glob("*")):
            if f"{WEIGHTS}/{blob.name}" in untied:  # the head's copy of the table: not needed
                continue
            blobs += 1
            (ctx.out / WEIGHTS).mkdir(exist_ok=True)
            if (ctx.out / WEIGHTS / blob.name).exists():
                shared += 1
                continue
            link_or_copy(blob, ctx.out / WEIGHTS / blob.name)
        inputs, outputs = io_specs(src_dir / MODEL)
        model = f"{graph}_parts.json" if split is not None else f"{graph}_{MODEL}"
        graphs[graph] = {"model": model, "from": ctx.step["inputs"][graph],
                         "inputs": inputs, "outputs": outputs,
                         **({"parts": len(split["pieces"])} if split else {})}
    device = _shared(ctx)
    host = _host(ctx)
    ckpt = checkpoint_dir(ctx.inputs.get("source"))
    copied = [f for f in CHECKPOINT_FILES if ckpt is not None and (ckpt / f).is_file()]
    for f in copied:
        link_or_copy(ckpt / f, ctx.out / f)
    described = {"graphs": graphs, "prefill_length": p["prefill_length"],
                 "context_length": p["context_length"],
                 "runs_on": {k: p[k] for k in ("ep", "backend", "provider_options")},
                 **({"shared_context": device} if device else {}),
                 **({"host": host} if host else {})}
    (ctx.out / BUNDLE).write_text(json.dumps(described, indent=2, sort_keys=True))
    config = json.loads((ckpt / "config.json").read_text()) if "config.json" in copied else {}
    genai = genai_config(config, described, _generation(ckpt))
    (ctx.out / "genai_config.json").write_text(json.dumps(genai, indent=2))
    weight_bytes = sum(f.stat().st_size for f in (ctx.out / WEIGHTS).glob("*")) \
        if (ctx.out / WEIGHTS).is_dir() else 0
    return StepResult(metrics={"graphs": list(graphs), "weight_blobs": blobs - shared,
                               "blobs_shared_by_graphs": shared, "weight_bytes": weight_bytes,
                               "client_files": copied,
                               "context_length": p["context_length"],
                               "prefill_length": p["prefill_length"]})


def _host(ctx: StepContext) -> dict[str, str]:
    """The host's graphs (export.on_host) beside the target's, their weights in weights/."""
    src = ctx.inputs.get("host")
    if src is None:
        return {}
    made = json.loads((src / "result.json").read_text())["metrics"]["layers"]
    for entry in made.values():
        link_or_copy(src / entry["model"], ctx.out / entry["model"])
    for blob in (src / WEIGHTS).glob("*"):
        (ctx.out / WEIGHTS).mkdir(exist_ok=True)
        if not (ctx.out / WEIGHTS / blob.name).exists():
            link_or_copy(blob, ctx.out / WEIGHTS / blob.name)
    return {layer: entry["model"] for layer, entry in made.items()}


def _copy_parts(src: Path, out: Path, graph: str, split: dict[str, Any]) -> None:
    """A split graph's parts as `<graph>_part<k>.onnx` beside the other graphs (so they read
    the one weights/ folder: a weight prefill and decode share is stored once) and their index
    as `<graph>_parts.json`; the parts' recorded sample inputs stay in the store."""
    rows = []
    for k, part in enumerate(split["pieces"]):
        where = src / part["dir"]
        name = f"{graph}_part{k}.onnx"
        link_or_copy(where / MODEL, out / name)
        for blob in (where / WEIGHTS).glob("*"):
            (out / WEIGHTS).mkdir(exist_ok=True)
            if not (out / WEIGHTS / blob.name).exists():
                link_or_copy(blob, out / WEIGHTS / blob.name)
        rows.append({**part, "model": name})
    (out / f"{graph}_parts.json").write_text(json.dumps({**split, "pieces": rows}, indent=1,
                                                        sort_keys=True))


def _shared(ctx: StepContext) -> dict[str, Any] | None:
    """The shared-context set (both graphs, one binary) copied into `device/`, and what its
    step found: whether this host loads it."""
    src = ctx.inputs.get("shared")
    if src is None:
        return None
    found = json.loads((src / "result.json").read_text())["metrics"]
    (ctx.out / DEVICE).mkdir()
    for name in (*found["models"], *found["binaries"]):
        link_or_copy(src / name, ctx.out / DEVICE / name)
    return {"folder": DEVICE, "models": found["models"], "binaries": found["binaries"],
            "binary_bytes": found["binary_bytes"], "loads_here": found["loads_here"],
            "why_not": found["why_not"]}


def _generation(ckpt: Path | None) -> dict[str, Any]:
    path = None if ckpt is None else ckpt / "generation_config.json"
    return json.loads(path.read_text()) if path is not None and path.is_file() else {}


def genai_config(config: dict[str, Any], bundle: dict[str, Any],
                 generation: dict[str, Any]) -> dict[str, Any]:
    """onnxruntime-genai's config for the two graphs: a decoder pipeline whose first model
    runs on the prompt and second on each generated token. onnxruntime-genai 0.18 reads this
    layout but cannot run the pair (measured: it feeds the prompt unpadded, its static cache
    is its own uint8 sliding window, and its dynamic cache wants present = past + new); the
    docs/generation.md says so. `modelplan generate` runs the bundle."""
    from planner.models.generation import shape_of
    from planner.models.roles import CACHE, ROLES

    graphs = bundle["graphs"]
    key, value = CACHE.parts
    token = next(g for g in graphs if ROLES[g].token_stage)
    shape = shape_of(config) if config else None
    layers = shape.layers if shape else CACHE.layers([s["name"] for s in graphs[token]["inputs"]])

    def io(graph: str, key: str) -> list[str]:
        return [s["name"] for s in graphs[graph][key]]

    eos = generation.get("eos_token_id", config.get("eos_token_id"))
    context = bundle["context_length"]  # tokens at positions 0 .. context - 1
    return {"model": {
        "type": "decoder-pipeline",
        "bos_token_id": generation.get("bos_token_id", config.get("bos_token_id")),
        "eos_token_id": eos, "pad_token_id": config["pad_token_id"]
        if config.get("pad_token_id") is not None else (eos[0] if isinstance(eos, list)
                                                          else eos),
        "context_length": context, "vocab_size": shape.vocab if shape else None,
        "decoder": {
            "num_hidden_layers": layers, "head_size": shape.head_dim if shape else None,
            "num_key_value_heads": shape.kv_heads if shape else None,
            "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                       "position_ids": "position_ids",
                       "past_key_names": f"{CACHE.past}.%d.{key}",
                       "past_value_names": f"{CACHE.past}.%d.{value}"},
            "outputs": {"logits": "logits", "present_key_names": f"{CACHE.present}.%d.{key}",
                        "present_value_names": f"{CACHE.present}.%d.{value}"},
            "pipeline": [  # each graph a stage: the prompt's, then each new token's
                {g: {"filename": graphs[g]["model"], "inputs": io(g, "inputs"),
                     "outputs": io(g, "outputs"),
                     **({} if ROLES[g].token_stage else {"run_on_token_gen": False}),
                     **({} if ROLES[g].prompt_stage else {"run_on_prompt": False})}}
                for g in graphs]}},
        "search": {"do_sample": False, "num_beams": 1, "max_length": context,
                   "past_present_share_buffer": False}}
