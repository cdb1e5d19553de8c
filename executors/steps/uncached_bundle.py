"""uncached_bundle: a causal LM that keeps no key/value cache (OpenAI GPT's, RWKV's forward),
delivered as its one graph `uncached_model.onnx`, which the host runs on the whole prefix for
each new token (`modelplan generate`; Optimum's ORTModelForCausalLM with use_cache=False opens
a free-axes one), with `bundle.json` (the graph's I/O, the EP, the context it holds) and the
checkpoint's config, generation config and tokenizer files."""

from __future__ import annotations

from executors.run.step_api import StepContext, StepResult
from executors.steps.bundle import deliver


def run(ctx: StepContext) -> StepResult:
    return deliver(ctx, {"context_length": int(ctx.params["context_length"])})
