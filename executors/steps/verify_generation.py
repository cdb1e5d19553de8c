"""verify_generation: a generating model's deliverable (every graph on the target's EP) decodes
greedily on real inputs, teacher-forced along PyTorch's own greedy tokens so that every step's
logits compare with PyTorch's at the same prefix; both run through the one generation loop.
Token agreement is the share of steps whose argmax is PyTorch's token; the first divergence is
the first step where it is not (up to there the deliverable's free-running generation is
PyTorch's, token for token).

* A causal LM: shipped sentences through its tokenizer are the prompts; PyTorch decodes with
  the checkpoint's own cache. A compiled bundle's onnxruntime-genai stages (genai_stages) are
  checked the same way on the first prompt, fed as genai feeds them
  (executors/generation/pipeline.py), under `genai_stages`; either below the threshold fails
  the step.
* An encoder-decoder: verify's own inputs for the encoder (shipped sentences, synthesized
  speech, photographs through the model's preprocessor; random token ids for a text model
  without a tokenizer); PyTorch decodes through the same traced graph modules; both run to
  `new_tokens` tokens whatever the end token does (a random model may end at once), and a
  speech model's transcripts are compared as eval reads them (WER against PyTorch's)."""

from __future__ import annotations

import dataclasses
import gc
import json
from typing import Any

import numpy as np

from executors.evaluation import runner, textscore
from executors.generation import bundle, encoder_decoder, pipeline
from executors.generation.decoder_only import TorchLM, TorchPrefixLM
from executors.onnx.artifacts import METRICS
from executors.onnx.iospecs import kind_of
from executors.run.step_api import StepContext, StepResult
from executors.runtime import torchmodel
from executors.samples import Samples, checkpoint_dir
from executors.samples.generation import prompts
from executors.steps.agreement import compare, summarize
from executors.steps.verify import hint
from planner.core.diagnosis import VERDICTS
from planner.core.targets import of_params
from planner.models.roles import Kind, Trace, roles_of, uncached_graph

SPEECH = ("mel_features", "waveform", "spectrogram")
STAGES = "genai_stages"  # the metrics of a compiled bundle's onnxruntime-genai stages


def run(ctx: StepContext) -> StepResult:
    folder = ctx.inputs["candidate"]
    described = json.loads((folder / bundle.BUNDLE).read_text())
    if bundle.kind(described) is Kind.ENCODER_DECODER:
        return _verdict(ctx, _encoder_decoder(ctx), described)
    return _verdict(ctx, _decoder_only(ctx, folder, described), described)


def _decoder_only(ctx: StepContext, folder: Any, described: dict[str, Any]) -> dict[str, Any]:
    """PyTorch's greedy generations first, its model freed before the deliverable's sessions
    open: the step holds one of the two at a time, not both."""
    p = ctx.params
    model, _ = torchmodel.load(ctx.inputs["source"])
    eos = bundle.eos_ids(folder)
    vocab = int(model.config.get_text_config().vocab_size)
    room = max(1, int(described["context_length"]) - p["new_tokens"])
    asked, origin = prompts(p["prompts"], "verify", checkpoint_dir(ctx.inputs["source"]),
                            vocab, np.random.default_rng(1), room)
    reference = TorchPrefixLM(model) if uncached_graph(described["graphs"]) else TorchLM(model)
    wants = []
    for i, ids in enumerate(asked, 1):
        ctx.progress(f"  PyTorch's generation {i}/{len(asked)}: {len(ids)} prompt tokens")
        wants.append(reference.greedy(ids, p["new_tokens"], eos))
    model = reference = None
    gc.collect()
    graphs = bundle.lm_graphs(folder, described, of_params(p), p["provider_options"],
                              ctx.cache_dir)
    rows = []
    for i, (ids, want) in enumerate(zip(asked, wants, strict=True), 1):
        ctx.progress(f"  generation {i}/{len(asked)}: {len(ids)} prompt tokens")
        rows.append(compare(want, graphs.greedy(ids, len(want.tokens), follow=want.tokens)))
    metrics = summarize(rows, p["threshold"], origin)
    if pipeline.has_stages(described):  # what onnxruntime-genai runs: its stages, as genai
        # feeds them, on the first prompt (a wrapping wrong shows on any prompt; each step of
        # the simulator costs as much as the pair's), opened once the pair's sessions are
        # closed: HTP holds so many context binaries at once (a 1B model's four do not load)
        graphs = None
        gc.collect()
        staged = pipeline.stage_graphs(folder, described, of_params(p), p["provider_options"],
                                       ctx.cache_dir)
        ctx.progress("  generation 1 through onnxruntime-genai's stages")
        stage_rows = [compare(wants[0], staged.greedy(asked[0], len(wants[0].tokens),
                                                      follow=wants[0].tokens))]
        of_stages = summarize(stage_rows, p["threshold"], origin)
        metrics[STAGES] = {k: of_stages[k] for k in (
            "cosine_mean", "cosine_min", "token_agreement", "first_divergence_min",
            "exact_prompts", "prompts", "passed")}
    return metrics


def _encoder_decoder(ctx: StepContext) -> dict[str, Any]:
    p = ctx.params
    folder, source = ctx.inputs["candidate"], ctx.inputs["source"]
    files = runner.graph_files(folder)
    task = torchmodel.source_info(source)["task"]
    cx = runner.context(task, source, files)
    roles = roles_of(cx.specs)
    encoder = next(g for g, r in roles.items() if r.trace is Trace.ENCODER)
    samples = Samples(cx.specs[encoder], "verify", source=source)  # what verify feeds
    feeds = samples.feeds(p["prompts"])
    reference = runner.torch_graphs(source, cx)
    target = of_params(p)
    deliverable = runner.session_graphs(files, target, p["provider_options"], ctx.cache_dir, cx)
    how = dataclasses.replace(encoder_decoder.decoding(cx), eos=None, most=p["new_tokens"])
    compared = []
    for i, feed in enumerate(feeds, 1):
        ctx.progress(f"  generation {i}/{len(feeds)}")
        want = encoder_decoder.generate(reference, feed, cx, how)
        got = encoder_decoder.generate(deliverable, feed, cx,
                                       dataclasses.replace(how, follow=tuple(want.tokens)))
        compared.append(compare(want, got))
    metrics = summarize(compared, p["threshold"], samples.origin)
    if {kind_of(s) for s in cx.specs[encoder]} & set(SPEECH):
        tok = textscore.tokenizer(cx.checkpoint)  # transcripts' error rate, as eval reads it
        said = [_text(r["pytorch"], tok) for r in compared]
        heard = [_text(r["deliverable"], tok) for r in compared]
        metrics["wer_vs_pytorch"] = textscore.error_rates(heard, said)["wer"]
    return metrics


def _text(ids: list[int], tok: Any) -> str:
    return textscore.ids_text(ids) if tok is None else \
        str(tok.decode(ids, skip_special_tokens=True)).strip()


def _verdict(ctx: StepContext, metrics: dict, described: dict[str, Any]) -> StepResult:
    p = ctx.params
    (ctx.out / METRICS).write_text(json.dumps(metrics, indent=2, sort_keys=True))
    checked = ((metrics, ""), (metrics.get(STAGES, {}), "onnxruntime-genai's stages: "))
    for failed, whose in checked:
        if failed and not failed["passed"]:
            first = next(iter(described["graphs"].values()))["model"]
            raise ctx.fail(f"{whose}cosine_mean {failed['cosine_mean']:.4f} "
                           f"{VERDICTS['verify']} {p['threshold']} (token agreement "
                           f"{failed['token_agreement']:.3f}, first divergence at token "
                           f"{failed['first_divergence_min']})",
                           hint(ctx.inputs["candidate"] / first))
    return StepResult(metrics=metrics)
