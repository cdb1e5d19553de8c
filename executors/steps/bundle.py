"""bundle: an encoder-decoder model's graphs delivered together, as `encoder_model.onnx` and
`decoder_model.onnx` (hard links to their store entries where the filesystem allows, copies
otherwise) with `bundle.json` naming each graph's source step and I/O and the EP they were built
for, beside the checkpoint's config, tokenizer and preprocessor files; a Whisper bundle in
onnxruntime-genai's layout also gets its genai_config.json and audio_processor_config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from executors.generation import genai_speech
from executors.onnx.artifacts import MODEL
from executors.onnx.iospecs import io_specs
from executors.onnx.tied_head import tie_file
from executors.run.step_api import StepContext, StepResult
from executors.samples import checkpoint_dir
from executors.steps.lm_bundle import CHECKPOINT_FILES
from executors.store.weights import link_blobs, link_or_copy

CLIENT_FILES = (*CHECKPOINT_FILES, "preprocessor_config.json", "source.spm", "target.spm",
                "spiece.model", "sentencepiece.bpe.model")


def run(ctx: StepContext) -> StepResult:
    return deliver(ctx)


def deliver(ctx: StepContext, lengths: dict[str, int] | None = None) -> StepResult:
    """The graphs, bundle.json and the client files in the step's folder; `lengths` (a causal
    LM's graph on the whole prefix: its context) are said in bundle.json, and such a bundle
    gets no genai layout (genai runs decoders over a key/value cache)."""
    described = {}
    for graph in ctx.params["graphs"]:
        src_dir = ctx.inputs[graph]
        for f in sorted(src_dir.iterdir()):
            if f.name == MODEL or f.name.startswith(f"{MODEL}."):  # the model and its weights
                link_or_copy(f, ctx.out / f"{graph}_{f.name}")
        untied = tie_file(ctx.out / f"{graph}_{MODEL}", src_dir)  # the head reads the shared table
        link_blobs(src_dir, ctx.out, untied)  # named by content: the graphs share them
        inputs, outputs = io_specs(src_dir / MODEL)
        described[graph] = {"model": f"{graph}_{MODEL}", "from": ctx.step["inputs"][graph],
                            "inputs": inputs, "outputs": outputs}
    p = ctx.params
    bundle: dict[str, Any] = {"graphs": described, **(lengths or {})}
    if "ep" in p:  # the EP the graphs were built for: `modelplan generate` opens them there
        bundle["runs_on"] = {k: p[k] for k in ("ep", "backend", "provider_options")}
    ckpt = checkpoint_dir(ctx.inputs.get("source"))
    copied = [f for f in CLIENT_FILES if ckpt is not None and (ckpt / f).is_file()]
    for f in copied:  # what reads the input and writes the text: tokenizer, preprocessor
        link_or_copy(ckpt / f, ctx.out / f)
    (ctx.out / "bundle.json").write_text(json.dumps(bundle, indent=2, sort_keys=True))
    metrics = {"graphs": list(described), "client_files": copied}
    if ckpt is not None and (ckpt / "config.json").is_file() and lengths is None:
        why = genai_speech.write(ctx.out, _json(ckpt / "config.json"), bundle,
                                 _json(ckpt / "preprocessor_config.json"))
        metrics["genai"] = "whisper" if why is None else f"none: {why}"
    return StepResult(metrics=metrics)


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}
