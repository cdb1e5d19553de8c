"""Build benchmarks on the packaged MiniLM, each in a fresh store:

1. up to `tag` (quant=none target=cpu) with the planner's elision on and off
   (planner.rules.elide=false): both wall times, their ratio, and whether the final
   artifacts are byte-identical (apart from the modelplan.facts provenance stamp, which
   names the producing step's key and so differs by construction);
2. the full default pipeline (w8a16 per-channel, QNN HTP): per-step wall time and peak RSS;
3. re-running the tiny_bert CPU build with everything cached: whole-command wall time.

Run: python benchmarks/build_bench.py [--skip-full]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
UP_TO_TAG = ["quant=none", "target=cpu", "verify=none", "perf=none"]
TINY_CPU = ["model=tiny_bert", *UP_TO_TAG]


def run(args: list[str], store: Path, outputs: Path) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "planner.cli", "run", *args, "--store",
                          str(store), "--outputs", str(outputs), "--json", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit(f"run {' '.join(args)} failed:\n{out.stderr}")
    return json.loads(out.stdout), wall


def without_stamp(path: str) -> bytes:
    import onnx

    model = onnx.load(path)
    keep = [p for p in model.metadata_props if p.key != "modelplan.facts"]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    return model.SerializeToString(deterministic=True)


def table(record: dict[str, Any]) -> list[str]:
    lines = [f"  {'step':<10} {'action':<7} {'wall s':>8} {'peak RSS MB':>12}"]
    for s in record["steps"]:
        wall = f"{s['wall_s']:.2f}" if s["action"] == "run" else "-"
        rss = f"{s['peak_rss_mb']:.0f}" if s["action"] == "run" else "-"
        lines.append(f"  {s['id']:<10} {s['action']:<7} {wall:>8} {rss:>12}")
    return lines


def elision(tmp: Path) -> None:
    on, on_wall = run(UP_TO_TAG, tmp / "s-on", tmp / "o-on")
    off, off_wall = run([*UP_TO_TAG, "planner.rules.elide=false"], tmp / "s-off", tmp / "o-off")
    same = without_stamp(on["published"]["model.onnx"]) == without_stamp(
        off["published"]["model.onnx"])
    print("MiniLM up to tag (fresh store each)")
    print(f"  elision on   {on_wall:7.2f} s  (steps run: "
          f"{sum(s['action'] == 'run' for s in on['steps'])})")
    print(f"  elision off  {off_wall:7.2f} s  (steps run: "
          f"{sum(s['action'] == 'run' for s in off['steps'])})")
    print(f"  ratio on/off {on_wall / off_wall:7.2f}")
    print(f"  final artifacts identical apart from the provenance stamp: {same}")


def full(tmp: Path) -> None:
    record, wall = run([], tmp / "s-full", tmp / "o-full")
    print(f"Default pipeline: MiniLM, w8a16 per-channel, QNN HTP (fresh store): {wall:.1f} s")
    print("\n".join(table(record)))
    verify = next(s for s in record["steps"] if s["id"] == "verify")["metrics"]
    perf = next(s for s in record["steps"] if s["id"] == "perf")["metrics"]
    print(f"  verify cosine mean {verify['cosine_mean']:.4f} min {verify['cosine_min']:.4f}; "
          f"latency median {perf['latency_ms_median']:.0f} ms, p90 "
          f"{perf['latency_ms_p90']:.0f} ms; nodes on QNN {perf['nodes_on_ep']}/"
          f"{perf['nodes_total']}")


def cached(tmp: Path) -> None:
    run(TINY_CPU, tmp / "s-tiny", tmp / "o-tiny")
    walls = []
    for _ in range(5):
        record, wall = run(TINY_CPU, tmp / "s-tiny", tmp / "o-tiny")
        assert all(s["action"] in ("cached", "elided") for s in record["steps"])
        walls.append(wall)
    print(f"tiny_bert CPU build, everything cached: median {sorted(walls)[2]:.2f} s "
          "per whole command (goal <= 1.5 s)")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cached(tmp)
        elision(tmp)
        if "--skip-full" not in sys.argv:
            full(tmp)


if __name__ == "__main__":
    main()
