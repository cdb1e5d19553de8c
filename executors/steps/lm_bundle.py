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

from executors.generation import genai, windowed
from executors.generation.bundle import BUNDLE
from executors.onnx import pieces
from executors.onnx.artifacts import MODEL
from executors.onnx.iospecs import io_specs
from executors.onnx.tied_head import tie_file
from executors.run.step_api import StepContext, StepResult
from executors.runtime import torchmodel
from executors.samples import SEEDS, checkpoint_dir
from executors.samples.generation import MAX_STEPS, prompts
from executors.store.weights import WEIGHTS, link_blobs, link_or_copy
from planner.models.lm_classes import completed
from planner.models.roles import CACHE, prompt_and_token

# what a client needs beside the graphs (tokenizer files of the usual tokenizer families)
CHECKPOINT_FILES = ("config.json", "generation_config.json", "tokenizer.json",
                    "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                    "merges.txt", "vocab.txt", "tokenizer.model", "added_tokens.json",
                    "chat_template.jinja")
STEP_FILES = ("manifest.json", "result.json", "metrics.json")  # the store's, not the model's
DEVICE = "device"  # the shared-context set: both graphs, the weights once, for the device
CALIBRATION_PROMPTS = 4  # prompts whose cache ranges scale genai's uint8 cache


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
        taken, there = link_blobs(src_dir, ctx.out, untied)  # untied: the head's table copy
        blobs, shared = blobs + taken, shared + there
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
    config = completed(json.loads((ckpt / "config.json").read_text())) \
        if "config.json" in copied else {}  # as the planner read it: omitted fields' defaults
    why_not = None if _stages(ctx, described) else _windowed(ctx, described, config, ckpt)
    (ctx.out / BUNDLE).write_text(json.dumps(described, indent=2, sort_keys=True))
    genai_config = genai.config_for(config, described, _generation(ckpt), ctx.out)
    if genai_config is not None:
        (ctx.out / genai.GENAI_CONFIG).write_text(json.dumps(genai_config, indent=2))
    weight_bytes = sum(f.stat().st_size for f in (ctx.out / WEIGHTS).glob("*")) \
        if (ctx.out / WEIGHTS).is_dir() else 0
    return StepResult(metrics={"graphs": list(graphs), "weight_blobs": blobs - shared,
                               "blobs_shared_by_graphs": shared, "weight_bytes": weight_bytes,
                               "client_files": copied,
                               "genai_windowed": described.get("genai", {}).get("model"),
                               "genai_stages": described.get("genai", {}).get("stages"),
                               **({"genai_windowed_not": why_not} if why_not else {}),
                               "context_length": p["context_length"],
                               "prefill_length": p["prefill_length"]})


def _windowed(ctx: StepContext, described: dict[str, Any], config: dict[str, Any],
              ckpt: Path | None) -> str | None:
    """A bundle of fixed shapes gets genai's windowed graph over its graphs
    (executors/generation/windowed.py; `described["genai"]` says what it is), its uint8 cache
    scaled from PyTorch's cache on calibration prompts; None, or why it gets none."""
    import numpy as np

    graphs = described["graphs"]
    _, token = prompt_and_token(graphs)
    if genai.free_past(graphs[token]["inputs"], ctx.out / graphs[token]["model"]):
        return None  # genai's plain decoder runs the token graph itself
    if not config or any(CACHE.is_state(s["name"]) for s in graphs[token]["inputs"]) or \
            not genai.describable(config, graphs[token]["inputs"]):
        return "genai's decoder does not describe this cache"
    why_not = windowed.fits(described, ctx.out)
    if why_not:
        return why_not
    model, _ = torchmodel.load(ctx.inputs["source"])
    vocab = int(model.config.get_text_config().vocab_size)
    asked, _ = prompts(CALIBRATION_PROMPTS, "calibration", ckpt, vocab,
                       np.random.default_rng(SEEDS["calibration"]), described["prefill_length"])
    ranges = windowed.cache_ranges(model, asked, MAX_STEPS)
    described["genai"] = windowed.write(ctx.out, described, windowed.scales(ranges))
    return None


def _stages(ctx: StepContext, described: dict[str, Any]) -> bool:
    """genai's compiled pipeline stages (genai_stages) beside the graphs, and in
    `described["genai"]` what they are; whether the bundle has them."""
    src = ctx.inputs.get("stages")
    if src is None:
        return False
    made = json.loads((src / "result.json").read_text())["metrics"]
    if not made.get("stages"):  # graphs genai's pipeline does not feed (the step says why)
        return False
    for name in (*made["stages"].values(), *made["binaries"]):
        link_or_copy(src / name, ctx.out / name)
    described["genai"] = {"stages": made["stages"], "binaries": made["binaries"],
                          "reads": made["reads"], "window": made["window"],
                          "context_length": made["slots"], "from": ctx.step["inputs"]["stages"]}
    return True


def _host(ctx: StepContext) -> dict[str, str]:
    """The host's graphs (export.on_host) beside the target's, their weights in weights/."""
    src = ctx.inputs.get("host")
    if src is None:
        return {}
    made = json.loads((src / "result.json").read_text())["metrics"]["layers"]
    for entry in made.values():
        link_or_copy(src / entry["model"], ctx.out / entry["model"])
    link_blobs(src, ctx.out)
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
        link_blobs(where, out)
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
