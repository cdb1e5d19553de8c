"""verify_generation: a causal LM's deliverable (both graphs, on the target's EP) generates
greedily on real prompts (an encoder-decoder model's: executors/steps/verify_seq2seq.py), teacher-forced along PyTorch's own greedy tokens so that every step's
logits compare with PyTorch's at the same prefix. Token agreement is the share of steps whose
argmax is PyTorch's token; the first divergence is the first step where it is not (up to there
the deliverable's free-running generation is PyTorch's, token for token)."""

from __future__ import annotations

import json

import numpy as np

from executors.onnx.artifacts import METRICS
from executors.run.step_api import StepContext, StepResult
from executors.runtime import generate, torchmodel
from executors.samples import checkpoint_dir
from executors.samples.lm import prompts
from executors.steps.agreement import compare, summarize
from planner.core.diagnosis import VERDICTS
from planner.core.targets import of_params


def run(ctx: StepContext) -> StepResult:
    p = ctx.params
    folder = ctx.inputs["candidate"]
    if "encoder" in json.loads((folder / generate.BUNDLE).read_text())["graphs"]:
        from executors.steps.verify_seq2seq import verify

        metrics = verify(ctx)
        return _verdict(ctx, metrics)
    model, _ = torchmodel.load(ctx.inputs["source"])
    eos = generate.eos_ids(folder)
    runner = generate.open_bundle(folder, of_params(p), p["provider_options"], ctx.cache_dir)
    vocab = int(model.config.get_text_config().vocab_size)
    room = max(1, runner.context - p["new_tokens"])
    asked, origin = prompts(p["prompts"], "verify", checkpoint_dir(ctx.inputs["source"]),
                            vocab, np.random.default_rng(1), room)
    rows = []
    for i, ids in enumerate(asked, 1):
        ctx.progress(f"  generation {i}/{len(asked)}: {len(ids)} prompt tokens")
        want = generate.torch_greedy(model, ids, p["new_tokens"], eos)
        got = runner.greedy(ids, len(want.tokens), forced=want.tokens)
        rows.append(compare(want, got))
    return _verdict(ctx, summarize(rows, p["threshold"], origin))


def _verdict(ctx: StepContext, metrics: dict) -> StepResult:
    p = ctx.params
    (ctx.out / METRICS).write_text(json.dumps(metrics, indent=2, sort_keys=True))
    if not metrics["passed"]:
        raise ctx.fail(f"cosine_mean {metrics['cosine_mean']:.4f} {VERDICTS['verify']} "
                       f"{p['threshold']} (token agreement {metrics['token_agreement']:.3f}, "
                       f"first divergence at token {metrics['first_divergence_min']})",
                       "use quant=w8a16_pc, or lower verify.threshold if this is acceptable")
    return StepResult(metrics=metrics)
