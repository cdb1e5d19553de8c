"""What reading the prompt a window at a time over the cache costs and gives, against a checkout
of the code before it (whose prefill graph read one window and no past).

Builds one random-weight llama (hidden 512, 4 layers, 8 heads, 2 key/value heads, a 32,000-token
vocabulary) for QNN HTP in `w8a16_pc` (prefill 64, context 256) with each code tree, each into a
store of its own, then prints:
* the build: the command's wall, the prefill chain's steps' walls, the deliverable's bytes,
  verify's and verify_generation's figures, the prefill graph's latency on the HTP simulator
  (its perf step: time to first token of a prompt of one window);
* a prompt of `--prompt-tokens` random ids read by `modelplan generate`'s runner over the bundle
  (the pair's graphs on the simulator): the wall to the first new token, the graph calls, and
  its first new tokens beside PyTorch's greedy tokens on the same prompt;
* the same prompt through the genai stages (`modelplan generate --genai`'s runner), whose first
  tokens are PyTorch's only where the prompt graph reads the earlier windows.

Run: python benchmarks/prompt_bench.py --baseline DIR [--out DIR] [--prompt-tokens N]
(DIR: a checkout of the code before, e.g. `git worktree add /tmp/before f26efaf`)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ["model=tiny_random", "model.random_init.model_type=llama",
         "+model.random_init.config.hidden_size=512",
         "+model.random_init.config.num_hidden_layers=4",
         "+model.random_init.config.num_attention_heads=8",
         "+model.random_init.config.num_key_value_heads=2",
         "+model.random_init.config.intermediate_size=1024",
         "+model.random_init.config.vocab_size=32000",
         "+model.random_init.config.max_position_embeddings=512",
         "export.shapes.prefill_length=64", "export.shapes.context_length=256",
         "target=qnn_htp", "quant=w8a16_pc"]
NEW_TOKENS = 4

RUNNER = r'''
import json, sys, time
import numpy as np
from pathlib import Path
from executors.generation import bundle, pipeline
from planner.core.targets import of_params
folder, ids, genai = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "1"
described = bundle.read(folder)
runs_on = described["runs_on"]
target = of_params(runs_on)
if genai:
    runner = pipeline.stage_graphs(folder, described, target, runs_on["provider_options"])
else:
    runner = bundle.lm_graphs(folder, described, target, runs_on["provider_options"])
calls = {"n": 0}
for name in ("prefill_forward", "decode_forward"):
    if hasattr(runner, name):
        inner = getattr(runner, name)
        def counted(feed, inner=inner):
            calls["n"] += 1
            return inner(feed)
        setattr(runner, name, counted)
if hasattr(runner, "_call"):
    inner_call = runner._call
    def counted_call(*a, inner=inner_call):
        calls["n"] += 1
        return inner(*a)
    runner._call = counted_call
start = time.perf_counter()
rows = runner.prompt(ids)
first = time.perf_counter() - start
tokens = [int(rows[-1].argmax())]
for _ in range(int(sys.argv[4]) - 1):
    tokens.append(int(runner.step(tokens[-1]).argmax()))
print(json.dumps({"first_token_s": first, "calls": calls["n"], "tokens": tokens}))
'''


def build(tree: Path, store: Path, out: Path) -> tuple[dict, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", *MODEL,
                           "--store", str(store), "--outputs", str(out), "--json"],
                          cwd=tree, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(tree), "MODELPLAN_SERVER": "0"})
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"build in {tree} failed: {done.stderr.strip()[-600:]}")
    return json.loads(done.stdout), wall


def read_prompt(tree: Path, folder: Path, ids: list[int], genai: bool) -> dict:
    done = subprocess.run([sys.executable, "-c", RUNNER, str(folder), json.dumps(ids),
                           "1" if genai else "0", str(NEW_TOKENS)], cwd=tree,
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"error": done.stderr.strip()[-300:]}
    return json.loads(lines[-1])


def torch_tokens(folder: Path, ids: list[int]) -> list[int]:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        got = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             pad_token_id=0)
    return got[0, len(ids):].tolist()


def checkpoint(record: dict) -> Path:
    """The random-weight checkpoint the resolve step made (its PyTorch reference)."""
    resolve = next(s for s in record["steps"] if s["id"] == "resolve")
    return Path(resolve["outputs"]["source.json"]).parent / "checkpoint"


def summary(label: str, record: dict, wall: float) -> Path:
    steps = {s["id"]: s for s in record["steps"]}
    folder = Path(record["published"]["bundle.json"]).parent
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    chain = ", ".join(f"{k.split('.', 1)[1]} {steps[k]['wall_s']:.1f} s" for k in steps
                      if k.startswith("prefill.") and steps[k].get("wall_s") is not None)
    verify = {g: steps[f"{g}.verify"]["metrics"].get("cosine_mean") for g in ("prefill", "decode")
              if f"{g}.verify" in steps}
    gen = steps.get("verify_generation", {}).get("metrics", {})
    perf = steps.get("prefill.perf", {}).get("metrics", {})
    latency = perf.get("latency_ms_median")
    print(f"{label}: command {wall:.0f} s; prefill chain: {chain}; deliverable "
          f"{size / 1e6:.0f} MB; verify cosine {verify}; verify_generation agreement "
          f"{gen.get('token_agreement')} cosine {gen.get('cosine_mean')}; prefill on the "
          f"simulator (median) {latency} ms", flush=True)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the code before")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--prompt-tokens", type=int, default=200)
    args = ap.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="prompt_bench_"))
    ids = [int(i) for i in __import__("numpy").random.default_rng(0).integers(
        3, 32000, args.prompt_tokens)]
    for label, tree in (("before", args.baseline.resolve()), ("after", ROOT)):
        record, wall = build(tree, work / f"store-{label}", work / f"out-{label}")
        folder = summary(label, record, wall)
        want = torch_tokens(checkpoint(record), ids)
        for genai in (False, True):
            got = read_prompt(tree, folder, ids, genai)
            runner = "genai stages" if genai else "pair"
            if "error" in got:
                print(f"  {runner}: {got['error']}", flush=True)
                continue
            print(f"  {runner}: a {len(ids)}-token prompt read in {got['first_token_s']:.1f} s "
                  f"({got['calls']} graph calls); first tokens {got['tokens']}, PyTorch's "
                  f"{want} ({'same' if got['tokens'] == want else 'differ'})", flush=True)


if __name__ == "__main__":
    main()
