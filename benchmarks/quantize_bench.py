"""Quantization of a real LM's shape, the whole graph against layer by layer
(executors/onnx/layerwise.py), one after the other on this machine.

A checkpoint of the shape (random weights, saved as --dtype) is built for the CPU without
quantization (its prefill graph: the float graph quantize reads); then the quantize step's own
code (stage, calibrate, quantize, save) runs on that graph in a child process, once per mode,
while the summed PSS of the child's process tree is sampled (benchmarks/memory.py; the RSS sum
beside it). Printed per mode: wall time, peak PSS and RSS, the pieces; and whether the two
quantized graphs are the same (the same nodes, and the same weights and scales: a weight's
file is named by its digest).

    python benchmarks/quantize_bench.py --shape qwen3-0.6b --dtype bf16 --work /tmp/qb
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from llm_bench import ENV, SHAPES, make_checkpoint
from memory import TreeMemory

MODES = ("never", "always")
QUANT = {"w8a16_pc": {"weight_type": "uint8", "activation_type": "uint16", "per_channel": True},
         "w4a16": {"weight_type": "int4", "activation_type": "uint16", "per_channel": True},
         "w8a8": {"weight_type": "uint8", "activation_type": "uint8", "per_channel": False}}


def float_graph(ckpt: Path, work: Path) -> Path:
    """The prefill graph a CPU build without quantization makes (quantize's input)."""
    argv = [sys.executable, "-m", "planner.cli", "run", "model=local_hf", f"model.path={ckpt}",
            "target=cpu", "quant=none", "verify=none", "perf=none",
            "export.shapes.prefill_length=16", "export.shapes.context_length=64",
            "--store", str(work / "store"), "--outputs", str(work / "out"), "--json"]
    done = subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **ENV, "MODELPLAN_SERVER": "0"})
    if not done.stdout.strip().startswith("{"):
        raise SystemExit(f"the float build failed: {done.stderr.strip().splitlines()[-1:]}")
    steps = {s["id"]: s for s in json.loads(done.stdout)["steps"]}
    last = next(s for s in ("prefill.optimize", "prefill.normalize", "prefill.export")
                if steps.get(s, {}).get("outputs"))
    return Path(steps[last]["outputs"]["model.onnx"])


def child(src: Path, out: Path, mode: str, quant: str, samples: int) -> None:
    """Quantize `src` into `out` as the quantize step does; print its metrics as JSON."""
    from executors.onnx import quantizer as Q
    from executors.onnx.iospecs import io_specs
    from executors.samples import Samples

    p = {"kind": "qdq", "symmetric": False, "profile": "cpu", **QUANT[quant],
         "calibration": {"method": "minmax", "samples": samples}}
    feeds = Samples(io_specs(src)[0], "calibration").feeds(samples)
    out.mkdir(parents=True)
    staged = Q.stage(src, out / ".float.onnx", p, feeds, None, pieces=mode)
    try:
        metrics = Q.quantize_to(staged, [], out / "model.onnx")
    finally:
        Q.unstage(staged)
    print(json.dumps(metrics))


def compare(src: Path, work: Path, profile: str, quant: str, samples: int = 4) -> str:
    """Quantize `src` whole and layer by layer (two pieces at least) in this process: "same (N
    pieces)", "whole: <why>" when it was quantized whole, or "DIFFERENT" (a stitch bug)."""
    from executors.onnx import quantizer as Q
    from executors.onnx.iospecs import io_specs
    from executors.samples import Samples

    p = {"kind": "qdq", "symmetric": False, "profile": profile, **QUANT[quant],
         "calibration": {"method": "minmax", "samples": samples}}
    feeds = Samples(io_specs(src)[0], "calibration").feeds(samples)
    said: dict[str, Any] = {}
    for mode in MODES:
        out = work / mode
        out.mkdir(parents=True)
        staged = Q.stage(src, out / ".float.onnx", p, feeds, None, pieces=mode)
        try:
            said[mode] = Q.quantize_to(staged, [], out / "model.onnx")
        finally:
            Q.unstage(staged)
    pieces = said["always"].get("layerwise", {})
    if "whole" in pieces:
        return f"whole: {pieces['whole']}"
    same = same_graph(work / "never", work / "always")
    ok = same["same_nodes"] and same["same_initializers"]
    return f"same ({pieces.get('pieces')} pieces)" if ok else "DIFFERENT"


def measure(src: Path, work: Path, mode: str, quant: str, samples: int) -> dict[str, Any]:
    out = work / f"q-{mode}"
    argv = [sys.executable, __file__, "--child", str(src), str(out), mode, quant, str(samples)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **ENV})
    sampler = TreeMemory(proc.pid)
    stdout, stderr = proc.communicate()
    peak = sampler.stop()
    if proc.returncode:
        raise SystemExit(f"quantize ({mode}) failed: {stderr.strip().splitlines()[-1:]}")
    return {"mode": mode, "wall_s": round(time.perf_counter() - t0, 1),
            "tree_peak_pss": peak["pss"], "tree_peak_rss": peak["rss"],
            "metrics": json.loads(stdout.strip().splitlines()[-1]), "out": str(out)}


def same_graph(a: Path, b: Path) -> dict[str, Any]:
    import onnx

    ma, mb = (onnx.load(str(p / "model.onnx"), load_external_data=False) for p in (a, b))
    nodes = [sorted(n.SerializeToString(deterministic=True) for n in m.graph.node)
             for m in (ma, mb)]
    inits = [{i.name: i.SerializeToString(deterministic=True) for i in m.graph.initializer}
             for m in (ma, mb)]
    return {"same_nodes": nodes[0] == nodes[1], "same_initializers": inits[0] == inits[1],
            "nodes": len(nodes[0]), "initializers": len(inits[0])}


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        src, out, mode, quant, samples = sys.argv[2:7]
        child(Path(src), Path(out), mode, quant, int(samples))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--quant", choices=sorted(QUANT), default="w8a16_pc")
    ap.add_argument("--samples", type=int, default=16, help="calibration samples")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=False)
    ckpt = make_checkpoint(args.work / "ckpt", args.shape, args.dtype)
    print(f"checkpoint: {args.shape} {args.dtype}, {ckpt['gib']:.2f} GiB, "
          f"{ckpt['params'] / 1e6:.0f} M parameters", flush=True)
    src = float_graph(args.work / "ckpt", args.work)
    fp32 = sum(f.stat().st_size for f in src.parent.rglob("*") if f.is_file())
    print(f"float prefill graph: {fp32 / 2**30:.2f} GiB ({src})", flush=True)
    rows = []
    for mode in MODES:
        row = measure(src, args.work, mode, args.quant, args.samples)
        rows.append(row)
        print(f"{args.quant} {mode:>6}: {row['wall_s']:7.1f} s, tree peak PSS "
              f"{row['tree_peak_pss'] / 2**30:5.2f} GiB (RSS sum "
              f"{row['tree_peak_rss'] / 2**30:5.2f}) = {row['tree_peak_pss'] / fp32:.2f}x the "
              f"fp32 graph; {row['metrics'].get('layerwise', 'whole graph')}", flush=True)
    same = same_graph(*(Path(r["out"]) for r in rows))
    print(f"same QDQ graph: nodes {same['same_nodes']} ({same['nodes']}), weights and scales "
          f"{same['same_initializers']} ({same['initializers']})")
    if args.json_out:
        args.json_out.write_text(json.dumps({"checkpoint": ckpt, "graph_bytes": fp32,
                                             "quant": args.quant, "modes": rows,
                                             "same": same}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
