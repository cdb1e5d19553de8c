"""What reliability costs:

1. heavy steps in another process (the run's warm worker, executors/run/workers.py) against the
   same steps in the run's own process, per step, on tiny_bert (CPU) and on the default MiniLM build (QNN HTP), each
   in a fresh store;
2. a fully cached run (tiny_bert CPU; the MiniLM build without perf, which always runs):
   whole-command wall time with entries verified on use by their (size, mtime, inode) stamps,
   and with every file re-hashed (stamps stale, as after copying a store).

Run: python benchmarks/reliability_bench.py [--skip-minilm] [--repeat N]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TINY_CPU = ["model=tiny_bert", "quant=none", "target=cpu", "verify=none", "perf=none"]
# The same CLI with no op declared HEAVY: every step runs in the run's own process.
IN_PROCESS = ("import dataclasses, sys\n"
              "from planner import ops\n"
              "for name, op in list(ops.OPS.items()):\n"
              "    ops.OPS[name] = dataclasses.replace(op, traits=op.traits - {ops.Trait.HEAVY})\n"
              "from planner.cli.main import main\n"
              "sys.exit(main(sys.argv[1:]))\n")


def run(args: list[str], store: Path, outputs: Path, in_process: bool = False,
        ) -> tuple[dict[str, Any], float]:
    entry = ["-c", IN_PROCESS] if in_process else ["-m", "planner.cli.main"]
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, *entry, "run", *args, "--store", str(store),
                          "--outputs", str(outputs), "--json", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit(f"run {' '.join(args)} failed:\n{out.stderr}")
    return json.loads(out.stdout), wall


def cached(label: str, args: list[str], store: Path, outputs: Path, repeat: int) -> None:
    """A fully cached run of `args` on `store` (built already), verified by stamps, then with
    every stamp made stale so that every file is re-hashed."""
    walls = []
    for _ in range(repeat):
        record, wall = run(args, store, outputs)
        assert all(s["action"] in ("cached", "elided") for s in record["steps"])
        walls.append(wall)
    rehash = []
    for _ in range(3):
        for manifest in store.glob("??/*/manifest.json"):
            data = json.loads(manifest.read_text())
            data["verified"] = {}
            manifest.write_text(json.dumps(data))
        rehash.append(run(args, store, outputs)[1])
    print(f"{label}, everything cached (whole command)")
    print(f"  verified by stamps     median {statistics.median(walls):.2f} s "
          f"(min {min(walls):.2f}, {len(walls)} runs; goal < 0.5 s)")
    print(f"  every file re-hashed   median {statistics.median(rehash):.2f} s")


def per_step(name: str, args: list[str], tmp: Path, repeat: int) -> Path:
    """Per-step wall time and peak RSS, child vs in-process; returns a store it built."""
    walls: dict[str, dict[str, list[float]]] = {"child": {}, "in-process": {}}
    totals: dict[str, list[float]] = {"child": [], "in-process": []}
    peaks: dict[str, dict[str, float]] = {"child": {}, "in-process": {}}
    for i in range(repeat):
        for mode in ("child", "in-process"):
            record, wall = run(args, tmp / f"s-{name}-{mode}-{i}", tmp / f"o-{name}-{mode}-{i}",
                               in_process=mode == "in-process")
            totals[mode].append(wall)
            for s in record["steps"]:
                if s["action"] == "run":
                    walls[mode].setdefault(s["id"], []).append(s["wall_s"])
                    peaks[mode][s["id"]] = s["peak_rss_mb"]
    print(f"{name}: heavy steps on a warm worker (child) vs in the run's process "
          f"(fresh store, median of {repeat})")
    print(f"  {'step':<10} {'child s':>8} {'in-proc s':>10} {'extra s':>8} "
          f"{'child MB':>9} {'in-proc MB':>11}")
    for step_id in walls["child"]:
        c = statistics.median(walls["child"][step_id])
        p = statistics.median(walls["in-process"].get(step_id, [0.0]))
        print(f"  {step_id:<10} {c:8.2f} {p:10.2f} {c - p:+8.2f} "
              f"{peaks['child'][step_id]:9.0f} {peaks['in-process'].get(step_id, 0):11.0f}")
    c, p = statistics.median(totals["child"]), statistics.median(totals["in-process"])
    print(f"  {'whole run':<10} {c:8.2f} {p:10.2f} {c - p:+8.2f}")
    return tmp / f"s-{name}-child-0"


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        store = per_step("tiny_bert CPU", TINY_CPU, tmp, max(repeat, 3))
        cached("tiny_bert CPU build", TINY_CPU, store, tmp / "o-cached", max(repeat, 7))
        if "--skip-minilm" not in sys.argv:
            store = per_step("MiniLM default (w8a16_pc, QNN HTP)", [], tmp, repeat)
            cached("MiniLM default build without perf (perf always runs)", ["perf=none"], store,
                   tmp / "o-cached-minilm", max(repeat, 3))


if __name__ == "__main__":
    main()
