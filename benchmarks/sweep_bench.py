"""Sweep benchmarks on tiny_bert:

1. a 6-job sweep (quant=w8a8,w8a16,w8a16_pc x target=cpu,qnn_htp) run merged by
   `modelplan run -m` vs the same 6 jobs run one after another as separate `modelplan run`
   commands sharing one store (goal: merged <= 0.5x separate), each from a fresh store;
2. re-running the merged sweep with everything cached (goal <= 3 s; perf always runs);
3. planning a 1,000-job sweep with `modelplan plan -m` (goal <= 20 s).

Run: python benchmarks/sweep_bench.py
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ["model=tiny_bert", "export.shapes.sequence_length=32", "verify.samples=2", "perf.iterations=3"]
QUANTS, TARGETS = ["w8a8", "w8a16", "w8a16_pc"], ["cpu", "qnn_htp"]


def cli(*args: str) -> float:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "planner.cli", *args], capture_output=True,
                         text=True, cwd=ROOT, check=False)
    if out.returncode != 0:
        sys.exit(f"modelplan {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        sweep = [*BASE, f"quant={','.join(QUANTS)}", f"target={','.join(TARGETS)}"]
        merged = cli("run", "-m", *sweep, "--store", str(tmp / "merged"), "--sweep-dir",
                     str(tmp / "sweep"), "--quiet")
        separate = sum(cli("run", *BASE, f"quant={q}", f"target={t}", "--store",
                           str(tmp / "separate"), "--outputs", str(tmp / "out"), "--quiet")
                       for q, t in itertools.product(QUANTS, TARGETS))
        cached = sorted(cli("run", "-m", *sweep, "--store", str(tmp / "merged"), "--sweep-dir",
                            str(tmp / f"again{i}"), "--quiet") for i in range(3))[1]
        plan_1000 = cli("plan", "-m", "model=tiny_bert", "quant=w8a8,w8a16,w8a16_pc,fp16",
                        "target=cpu,qnn_htp", "export.shapes.sequence_length=range(16,141)",
                        "--store", str(tmp / "plan"), "-o", str(tmp / "plan.txt"))
    print("tiny_bert, 6-job sweep (quant x target), fresh stores")
    print(f"  merged (modelplan run -m, -j cores)   {merged:7.2f} s")
    print(f"  6 separate modelplan run commands     {separate:7.2f} s")
    print(f"  ratio merged/separate                 {merged / separate:7.2f}  (goal <= 0.5)")
    print(f"  merged again, everything cached       {cached:7.2f} s  (goal <= 3 s; perf reruns)")
    print(f"plan a 1,000-job sweep (plan -m)        {plan_1000:7.2f} s  (goal <= 20 s)")


if __name__ == "__main__":
    main()
