"""Per-module perf on the packaged MiniLM, in one fresh store:

1. CPU, fp32: the per-module table from ONNX Runtime's profiler, its sum against the measured
   total (the profiled runs, and the unprofiled median latency), how profiled nodes were mapped
   back to tags, and the top of the tree;
2. CPU, perf.module=BertAttention: one row per layer, each piece checked with onnx.checker
   (full) and timed alone;
3. QNN HTP (the default w8a16 per-channel build, simulator), perf.module=BertAttention: what the
   EP's own profiling gives per module (HTP cycles per op), and each attention compiled and
   timed alone;
4. the cost of the breakdown: the perf step's wall time with perf.profile_runs=3 and =0.

Run: python benchmarks/module_bench.py [--skip-htp]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CPU = ["quant=none", "target=cpu", "verify=none", "perf.iterations=10"]
HTP = ["verify=none"]
MODULE = "perf.module=BertAttention"


def run(args: list[str], store: Path, outputs: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", *args, "--store",
                          str(store), "--outputs", str(outputs), "--json", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    if out.returncode != 0:
        sys.exit(f"run {' '.join(args)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def step(record: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in record["steps"] if s["id"] == step_id)


def profile_lines(record: dict[str, Any]) -> list[str]:
    from planner.render.modules import by_step, class_text, tree_text

    perf = step(record, "perf")["metrics"]
    prof = perf["profile"]
    rows = by_step(record)["perf"]
    root = rows[0]
    share = 100 * root["ms"] / prof["total_ms"]
    of_latency = 100 * root["ms"] / perf["latency_ms_median"]
    lines = [f"  profile: {prof['source']}, {prof['runs']} runs",
             f"  measured total (profiled runs)     {prof['total_ms']:9.3f} ms per run",
             f"  per-module sum (root module)       {root['ms']:9.3f} ms  ({share:.1f} % of the "
             + "total; goal within 10 %)",
             f"  unprofiled median latency          {perf['latency_ms_median']:9.3f} ms  (sum "
             + f"is {of_latency:.1f} % of it)",
             f"  mapped by (% of total)             {prof['mapped_by_percent']}"]
    if "total_cycles" in prof:
        lines.insert(2, f"  HTP ops profiled                   {prof['ops']} "
                        f"({prof['total_cycles'] / 1e6:.2f} Mcycles per run)")
    return lines + ["", *tree_text(rows, 12), "", *class_text(rows)]


def alone_lines(record: dict[str, Any]) -> list[str]:
    from executors.onnx import pieces
    from executors.onnx.artifacts import MODEL, problems
    from planner.render.modules import alone_text, by_step

    entry = Path(step(record, "extract")["outputs"][pieces.PIECES]).parent
    dirs = pieces.model_dirs(entry)
    clean = sum(problems(d / MODEL, tagged=True) == [] for d in dirs)
    return [f"  pieces: {len(dirs)}, passing onnx.checker (full) and tag checks: {clean}",
            *alone_text(by_step(record)["perf_module"])]


def walls(record: dict[str, Any], ids: list[str]) -> str:
    return ", ".join(f"{i} {step(record, i)['wall_s']:.1f} s" for i in ids
                     if step(record, i)["action"] == "run")


def main() -> None:
    skip_htp = "--skip-htp" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        store, outputs = Path(tmp) / "store", Path(tmp) / "out"
        cpu = run([*CPU, MODULE], store, outputs)
        print("MiniLM, CPU EP, fp32 (perf.iterations=10, profile_runs=3)")
        print("\n".join(profile_lines(cpu)))
        print(f"\nMiniLM, CPU EP, {MODULE}")
        print("\n".join(alone_lines(cpu)))
        print(f"  steps: {walls(cpu, ['extract', 'perf', 'perf_module'])}")
        plain = run([*CPU, "perf.profile_runs=0"], store, outputs)
        print(f"\nperf step wall on CPU: profile_runs=3 {step(cpu, 'perf')['wall_s']:.1f} s, "
              f"profile_runs=0 {step(plain, 'perf')['wall_s']:.1f} s")
        if skip_htp:
            return
        htp = run([*HTP, MODULE], store, outputs)
        print(f"\nMiniLM, QNN HTP (simulator), w8a16 per-channel, {MODULE}")
        print("\n".join(profile_lines(htp)))
        print()
        print("\n".join(alone_lines(htp)))
        print(f"  steps: {walls(htp, ['extract', 'compile_module', 'perf', 'perf_module'])}")
        plain = run([*HTP, "perf.profile_runs=0"], store, outputs)
        print(f"\nperf step wall on HTP: profile_runs=3 {step(htp, 'perf')['wall_s']:.1f} s, "
              f"profile_runs=0 {step(plain, 'perf')['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
