"""verify_generation for an encoder-decoder model's bundle: on verify's own inputs for the
encoder (shipped sentences, synthesized speech, photographs through the model's preprocessor;
random token ids for a text model without a tokenizer), PyTorch decodes greedily through the same traced
graph modules, then the deliverable (every graph on the target's EP) decodes teacher-forced
along PyTorch's tokens, so each step's logits compare at the same prefix; both run to
`new_tokens` tokens whatever the end token does (a random model may end at once)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from executors.evaluation import generation, runner, textscore
from executors.evaluation.base import Context
from executors.run.step_api import StepContext
from executors.runtime import generate, torchmodel
from executors.samples import Samples, kind_of
from executors.steps.agreement import compare, summarize
from planner.core.targets import of_params
from planner.models.tasks import AUDIO, IMAGE, TEXT


def _modality(cx: Context) -> str:
    kinds = {kind_of(s) for s in cx.specs["encoder"]}
    if "pixels" in kinds:
        return IMAGE
    return AUDIO if kinds & {"mel_features", "waveform", "spectrogram"} else TEXT


def verify(ctx: StepContext) -> dict[str, Any]:
    p = ctx.params
    folder, source = ctx.inputs["candidate"], ctx.inputs["source"]
    files = runner.graph_files(folder)
    task = torchmodel.source_info(source)["task"]
    cx = runner.context(task, source, files)
    modality = _modality(cx)
    samples = Samples(cx.specs["encoder"], "verify", source=source)  # what verify feeds
    feeds = samples.feeds(p["prompts"])
    reference = runner.torch_graphs(source, cx)
    target = of_params(p)
    deliverable = runner.session_graphs(files, target, p["provider_options"], ctx.cache_dir, cx)
    how = dataclasses.replace(generation.decoding(cx), eos=None, most=p["new_tokens"])
    compared = []
    for i, feed in enumerate(feeds, 1):
        ctx.progress(f"  generation {i}/{len(feeds)}")
        want = _run(reference, feed, cx, how)
        got = _run(deliverable, feed, cx, dataclasses.replace(how, follow=tuple(want.tokens)))
        compared.append(compare(want, got))
    metrics = summarize(compared, p["threshold"], samples.origin)
    if modality == AUDIO:  # a transcript's error rate against PyTorch's, as eval reads it
        tok = textscore.tokenizer(cx.checkpoint)
        said = [_text(r["pytorch"], tok) for r in compared]
        heard = [_text(r["deliverable"], tok) for r in compared]
        metrics["wer_vs_pytorch"] = textscore.error_rates(heard, said)["wer"]
    return metrics


def _run(graphs: dict[str, Any], feed: dict[str, np.ndarray], cx: Context,
         how: generation.Decoding) -> generate.Generated:
    record: list[np.ndarray] = []
    tokens = generation.generate(graphs, feed, cx, how, record)
    return generate.Generated(tokens, [np.asarray(r, np.float64) for r in record])


def _text(ids: list[int], tok: Any) -> str:
    return textscore.ids_text(ids) if tok is None else \
        str(tok.decode(ids, skip_special_tokens=True)).strip()
