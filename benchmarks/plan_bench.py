"""Median wall time of `modelplan plan` on the default config, and the share spent outside
Hydra compose (goals: <= 1.0 s, <= 20 %). Run: python benchmarks/plan_bench.py [N]."""

from __future__ import annotations

import json
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


def main() -> None:
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
