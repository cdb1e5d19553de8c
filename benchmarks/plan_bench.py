"""Median wall time of `modelplan plan` on the default config, and the share spent outside
Hydra compose (goals: <= 1.0 s, <= 20 %). Run: python benchmarks/plan_bench.py [N].

Sweeps: python benchmarks/plan_bench.py --jobs 1000,10000 [--runs R]
`modelplan plan -m` over a sweep of about that many jobs (two models, four precisions, two
targets, sequence lengths, and for 10,000 perf iterations too; goal: 10,000 jobs <= 5 s),
the whole command's wall and CPU time, against the same sweep planned job by job as before
incremental planning (planning.plan_sweep(incremental=False), rendered as the CLI renders it),
each in a fresh process; and whether the two print the same plan. Other jobs on the machine
slow both alike: the load average is printed with the figures.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def once(store: str) -> tuple[float, dict[str, float]]:
    env = {**os.environ, "MODELPLAN_TIMINGS": "1"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "planner.cli.main", "plan", "--store", store],
                         capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    wall = time.perf_counter() - t0
    line = next(ln for ln in out.stderr.splitlines() if ln.startswith("modelplan-timings "))
    return wall, json.loads(line.split(" ", 1)[1])


PER_JOB = """
import sys
from planner.planning import plan_sweep
from planner.render import sweep as render_sweep
data = plan_sweep(sys.argv[2:], store=sys.argv[1], incremental=False).to_json()
sys.stdout.write(render_sweep.render(data))
"""


def sweep(jobs: int) -> list[str]:
    """About `jobs` jobs: 2 models x 4 precisions x 2 targets x sequence lengths (x 10 perf
    iteration counts from 5,000 jobs up)."""
    base = ["model=tiny_bert,minilm", "quant=w8a8,w8a16,fp16,w8a16_pc", "target=cpu,qnn_htp"]
    iterations = 10 if jobs >= 5000 else 1
    lengths = math.ceil(jobs / 16 / iterations)
    out = [*base, f"export.shapes.sequence_length=range(16,{16 + lengths})"]
    return out + (["perf.iterations=range(5,15)"] if iterations > 1 else [])


def timed(argv: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of a child process, and what it printed."""
    before = os.times()
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=True)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user
                  + after.children_system - before.children_system), out.stdout


def sweeps(sizes: list[int], runs: int) -> None:
    med = statistics.median
    with tempfile.TemporaryDirectory() as store:
        for size in sizes:
            overrides = sweep(size)
            cli = [sys.executable, "-m", "planner.cli.main", "plan", "-m", "--store", store,
                   *overrides]
            old = [sys.executable, "-c", PER_JOB, store, *overrides]
            load = os.getloadavg()
            now = [timed(cli) for _ in range(runs)]
            before = [timed(old) for _ in range(runs)]
            jobs = now[0][2].strip().splitlines()[-1]
            print(f"modelplan plan -m {' '.join(overrides)}  ({runs} runs each, load average "
                  f"{load[0]:.1f} before, {os.getloadavg()[0]:.1f} after)")
            print(f"  {jobs}")
            print(f"  incremental (the CLI)  wall median {med(w for w, _, _ in now):6.2f} s  "
                  f"CPU {med(c for _, c, _ in now):6.2f} s  (goal for 10,000 jobs <= 5 s)")
            print(f"  job by job (before)    wall median {med(w for w, _, _ in before):6.2f} s  "
                  f"CPU {med(c for _, c, _ in before):6.2f} s")
            print(f"  same plan printed      {now[0][2] == before[0][2]}")


def main() -> None:
    if "--jobs" in sys.argv:
        at = sys.argv.index("--jobs")
        runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 3
        sweeps([int(n) for n in sys.argv[at + 1].split(",")], runs)
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    with tempfile.TemporaryDirectory() as store:
        once(store)  # warm the digest memo and the page cache
        runs = [once(store) for _ in range(n)]
    walls = [w for w, _ in runs]
    med = statistics.median
    compose = [t["compose_s"] for _, t in runs]
    inproc = [(t["total_s"] - t["compose_s"]) / t["total_s"] for _, t in runs]
    of_wall = [(w - c) / w for w, c in zip(walls, compose)]
    print(f"modelplan plan (default config), {n} runs")
    print(f"  wall median                      {med(walls):.3f} s  (goal <= 1.0 s)")
    print(f"  hydra compose (import + compose) {med(compose):.3f} s")
    print(f"  planner: validate .. keys        {med(t['plan_s'] for _, t in runs):.3f} s")
    print(f"  modelplan process time           {med(t['total_s'] for _, t in runs):.3f} s")
    print(f"  interpreter start + exit         {med(w - t['total_s'] for w, t in runs):.3f} s")
    print(f"  share outside compose, in-process {100 * med(inproc):.1f} %  (goal <= 20 %)")
    print(f"  share outside compose, of wall    {100 * med(of_wall):.1f} %  "
          "(includes interpreter start and exit)")


if __name__ == "__main__":
    main()
