"""Decode cost per token of an encoder-decoder model: the uncached decoder (the whole prefix,
padded to its length, every step) against the cached one-token decoder over a static cache
(export.shapes.decoder_cache=true). Builds a random-weight model of a real size's layer shapes
(BART: bart-base, d_model 768, 6+6 layers; T5: t5-small, d_model 512, 6+6 layers, relative
position bias) for the CPU in fp32 twice, then times each decoder at positions 1 .. N on ONNX
Runtime. Prints the table (ms per token by position) and writes JSON.

    .venv/bin/python benchmarks/seq2seq_cache_bench.py [--family bart|t5] [--length 128]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "bart": ("bart-base", {"d_model": 768, "encoder_layers": 6, "decoder_layers": 6,
                           "encoder_attention_heads": 12, "decoder_attention_heads": 12,
                           "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
                           "vocab_size": 50265, "max_position_embeddings": 1024}),
    "t5": ("t5-small", {"d_model": 512, "d_kv": 64, "num_heads": 8, "num_layers": 6,
                        "num_decoder_layers": 6, "d_ff": 2048, "vocab_size": 32128,
                        "relative_attention_num_buckets": 32,
                        "relative_attention_max_distance": 128}),
}


def build(work: Path, family: str, length: int, cached: bool) -> Path:
    overrides = ["model=tiny_random", f"model.random_init.model_type={family}",
                 *(f"+model.random_init.config.{k}={v}" for k, v in SHAPES[family][1].items()),
                 "target=cpu", "quant=none", "verify=none", "perf=none",
                 "export.shapes.sequence_length=64",
                 f"export.shapes.decoder_sequence_length={length}",
                 f"export.shapes.decoder_cache={'true' if cached else 'false'}"]
    name = f"{family}-{'cached' if cached else 'plain'}"
    done = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", *overrides,
                           "--store", str(work / "store"), "--outputs", str(work / "out"),
                           "--name", name, "--quiet"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"build failed: {done.stderr.strip().splitlines()[-1]}")
    return work / "out" / name


def session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so)


def time_plain(folder: Path, positions: list[int], runs: int) -> dict[int, float]:
    dec = session(folder / "decoder_model.onnx")
    specs = {i.name: i.shape for i in dec.get_inputs()}
    length, states = specs["input_ids"][1], np.zeros(specs["encoder_hidden_states"], np.float32)
    out = {}
    for p in positions:  # the uncached decoder computes every position up to the graph's length
        feed = {"input_ids": np.full((1, length), 5, np.int64), "encoder_hidden_states": states,
                "encoder_attention_mask": np.ones(specs["encoder_attention_mask"], np.int64)}
        out[p] = _median(lambda f=feed: dec.run(None, f), runs)
    return out


def time_cached(folder: Path, positions: list[int], runs: int) -> dict[int, float]:
    dec = session(folder / "decoder_model.onnx")
    feed = {i.name: np.zeros(i.shape, np.float32 if "float" in i.type else np.int64)
            for i in dec.get_inputs()}
    out = {}
    for p in positions:
        feed["position_ids"] = np.array([[p]], np.int64)
        feed["attention_mask"][0, :p] = 1
        out[p] = _median(lambda: dec.run(None, feed), runs)
    return out


def _median(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=sorted(SHAPES), default="bart")
    ap.add_argument("--length", type=int, default=128, help="decoder tokens (cache slots)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/"
                    "seq2seq_cache[_FAMILY].json")
    args = ap.parse_args()
    positions = sorted({1, 8, 32, args.length // 2, args.length - 1})
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plain = time_plain(build(work, args.family, args.length, False), positions, args.runs)
        cached = time_cached(build(work, args.family, args.length, True), positions, args.runs)
    # the uncached decoder's step at position p costs one pass over its whole length, and a
    # sequence of n tokens takes n such passes; the cached decoder's step is one token's
    rows = [{"position": p, "uncached_ms": plain[p], "cached_ms": cached[p]} for p in positions]
    print(f"{args.family} ({SHAPES[args.family][0]} shapes, random weights), CPU fp32, decoder "
          f"length {args.length}, 1 thread")
    print(f"{'position':>8}  {'uncached ms/token':>18}  {'cached ms/token':>16}")
    for r in rows:
        print(f"{r['position']:>8}  {r['uncached_ms']:>18.2f}  {r['cached_ms']:>16.2f}")
    total_plain = sum(plain[p] for p in positions) / len(positions) * args.length
    total_cached = sum(cached[p] for p in positions) / len(positions) * args.length
    print(f"{args.length} tokens: uncached ~{total_plain / 1000:.2f} s, cached "
          f"~{total_cached / 1000:.2f} s")
    out = args.out or ROOT / "benchmarks" / ("seq2seq_cache.json" if args.family == "bart"
                                             else f"seq2seq_cache_{args.family}.json")
    out.write_text(json.dumps({"family": args.family, "length": args.length, "rows": rows},
                              indent=2))


if __name__ == "__main__":
    main()
