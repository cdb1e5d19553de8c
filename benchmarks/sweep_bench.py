"""Sweep benchmarks on tiny_bert:

1. a 6-job sweep (quant=w8a8,w8a16,w8a16_pc x target=cpu,qnn_htp) run merged by
   `modelplan run -m` vs the same 6 jobs run one after another as separate `modelplan run`
   commands sharing one store (goal: merged <= 0.45x separate), each from a fresh store, with
   the merged sweep's timeline (when each step began and ended, on which warm worker, from
   the run records' start_s and wall_s) and its critical path;
2. re-running the merged sweep with everything cached (goal <= 3 s; perf always runs);
3. planning a 1,000-job sweep with `modelplan plan -m` (goal <= 20 s).

With `--exports`: the 4-job sweep quant=w8a8,w8a16 x target=cpu,qnn_htp run merged by the
local and the Ray executor, each from a fresh store: how many export steps each ran (goal: one,
the HTP graphs fixed from the CPU's free-axes export by fix_shapes), and each HTP job's
normalized node count and verify cosine beside a direct fixed-shape export's
(export.shapes.dynamic=false; goal: the same).

With `--executor ray`: the same 6-job sweep run merged by the local executor, by the Ray
executor on a Ray of its own (started and stopped by the run), and on a local Ray cluster
already running (`ray start --head`, joined with executor.address), each from a fresh store
(goal: Ray overhead <= 15 % on a running cluster; its second sweep finds warm workers).

Run: python benchmarks/sweep_bench.py [--executor ray | --exports]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ["model=tiny_bert", "export.shapes.sequence_length=32", "verify.samples=2", "perf.iterations=3"]
QUANTS, TARGETS = ["w8a8", "w8a16", "w8a16_pc"], ["cpu", "qnn_htp"]


# A Ray of its own binds to 127.0.0.1 only when told it has no cluster to join; no telemetry;
# the head and its drivers share a token of this benchmark's own.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}


def cli(*args: str) -> float:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "planner.cli.main", *args], capture_output=True,
                         text=True, cwd=ROOT, check=False, env={**os.environ, **RAY_ENV})
    if out.returncode != 0:
        sys.exit(f"modelplan {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return time.perf_counter() - t0


def ray_head(temp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`ray start --head --block` on loopback, with as many HTP units as cores (the simulator
    runs on them, as a Ray of its own gets): its address; ending it ends its processes."""
    ray = str(Path(sys.executable).parent / "ray")
    head = subprocess.Popen([ray, "start", "--head", "--block", "--port=0", f"--temp-dir={temp}",
                             f'--resources={{"qnn_htp": {os.cpu_count()}}}',
                             "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **RAY_ENV})
    address_file = temp / "ray_current_cluster"
    deadline = time.time() + 120
    while not address_file.is_file():
        if time.time() > deadline or head.poll() is not None:
            head.kill()
            sys.exit("ray start --head did not come up")
        time.sleep(0.1)
    return head, address_file.read_text().strip()


def ray_main() -> None:
    sweep = [*BASE, f"quant={','.join(QUANTS)}", f"target={','.join(TARGETS)}"]
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="mpbench-") as d:
        tmp = Path(d)

        def merged(name: str, *extra: str) -> float:
            return cli("run", "-m", *sweep, *extra, "--store", str(tmp / name), "--sweep-dir",
                       str(tmp / f"sweep-{name}"), "--quiet")

        local = merged("local")
        own = merged("ray-own", "executor=ray")
        head, address = ray_head(tmp / "ray")
        try:
            cold = merged("ray-cold", "executor=ray", f"executor.address={address}")
            warm = merged("ray-warm", "executor=ray", f"executor.address={address}")
        finally:
            head.send_signal(signal.SIGTERM)
            head.wait(timeout=120)
    print("tiny_bert, 6-job sweep (quant x target) run merged, fresh stores, -j cores")
    print(f"  local executor                        {local:7.2f} s")
    print(f"  ray, a Ray of its own (start + stop)  {own:7.2f} s  ({own / local - 1:+.0%})")
    print(f"  ray, a running local Ray, 1st sweep   {cold:7.2f} s  ({cold / local - 1:+.0%}"
          ", goal <= +15 %)")
    print(f"  ray, the same Ray, 2nd sweep          {warm:7.2f} s  ({warm / local - 1:+.0%}"
          ", its workers have imported torch)")


def timeline(sweep_dir: Path) -> dict[str, dict]:
    """The merged sweep's built steps by key: id, job, start, end, worker (from sweep.json)."""
    steps: dict[str, dict] = {}
    for job in json.loads((sweep_dir / "sweep.json").read_text())["jobs"]:
        for s in job["record"]["steps"]:
            if "start_s" in s and s["key"] not in steps:
                steps[s["key"]] = {"key": s["key"], "id": s["id"], "job": job["index"],
                                   "start": s["start_s"],
                                   "end": s["start_s"] + s["wall_s"], "op": s["op"],
                                   "worker": s.get("worker", "parent")}
    return steps


def critical_path(steps: dict[str, dict], sweep_dir: Path) -> list[dict]:
    """Back from the step that ended last: each step's predecessor is the step of its job that
    ended last before it began (its input, or what held its worker)."""
    jobs = {j["index"]: {s["key"] for s in j["record"]["steps"]}
            for j in json.loads((sweep_dir / "sweep.json").read_text())["jobs"]}
    member = {k: {i for i, keys in jobs.items() if k in keys} for k in steps}
    path = [max(steps.values(), key=lambda s: s["end"])]
    while True:
        now = path[-1]
        before = [s for k, s in steps.items() if member[k] & member[now["key"]]
                  and s["end"] <= now["start"] + 0.005 and k != now["key"]]
        if not before:
            return path[::-1]
        path.append(max(before, key=lambda s: s["end"]))


def import_seconds() -> float:
    """A fresh interpreter importing what the fork server preloads for this sweep."""
    code = ("import time; t = time.perf_counter(); import torch, transformers.modeling_utils, "
            "onnx, onnxruntime, onnxruntime_qnn, executors.run.wrapper; "
            "print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    return float(out.stdout.split()[-1])


def print_timeline(sweep_dir: Path, command_s: float) -> None:
    steps = timeline(sweep_dir)
    wall = json.loads((sweep_dir / "sweep.json").read_text())["wall_s"]
    builds = [s for s in steps.values() if s["op"] != "perf"]
    perfs = [s for s in steps.values() if s["op"] == "perf"]
    first = min(s["start"] for s in steps.values())
    print(f"merged sweep timeline: command {command_s:.2f} s = interpreter start, planning and "
          f"records {command_s - wall:.2f} s + the DAG {wall:.2f} s")
    print(f"  the fork server's imports alone (torch, transformers, ONNX Runtime) "
          f"{import_seconds():.2f} s, waited for by the first heavy step")
    print(f"  builds {first:.2f}-{max(s['end'] for s in builds):.2f} s, "
          f"measurements (perf, one at a time) {min(s['start'] for s in perfs):.2f}-"
          f"{max(s['end'] for s in perfs):.2f} s")
    for worker in sorted({s["worker"] for s in steps.values()}):
        mine = [s for s in steps.values() if s["worker"] == worker]
        print(f"  {worker:<7} {len(mine):3d} steps, busy {sum(s['end'] - s['start'] for s in mine):5.2f} s")
    print("  critical path (start-end s, worker):")
    for s in critical_path(steps, sweep_dir):
        print(f"    {s['id']:<10} job {s['job']}  {s['start']:5.2f}-{s['end']:5.2f}  {s['worker']}")


def run_json(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "planner.cli.main", *args, "--json", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, check=False,
                         env={**os.environ, **RAY_ENV})
    if out.returncode != 0:
        sys.exit(f"modelplan {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def htp_figures(record: dict) -> tuple[int, float, float]:
    """A job's normalized node count and verify cosine (mean, min)."""
    steps = {s["id"]: s.get("metrics") or {} for s in record["steps"]}
    return (steps["normalize"]["nodes_after"], steps["verify"]["cosine_mean"],
            steps["verify"]["cosine_min"])


def exports_main() -> None:
    grid = {"quant": ["w8a8", "w8a16"], "target": ["cpu", "qnn_htp"]}
    sweep = [*BASE, "perf=none", *(f"{k}={','.join(v)}" for k, v in grid.items())]
    rows = []
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="mpbench-") as d:
        tmp = Path(d)
        for executor in ("local", "ray"):
            t0 = time.perf_counter()
            summary = run_json("run", "-m", *sweep, f"executor={executor}", "--store",
                               str(tmp / executor), "--sweep-dir", str(tmp / f"sweep-{executor}"))
            wall = time.perf_counter() - t0
            built = {s["key"] for j in summary["jobs"] for s in j["record"]["steps"]
                     if s["op"] == "export" and s.get("action") == "run"}
            rows.append((executor, len(summary["jobs"]), len(built), wall))
            if executor == "local":
                derived = {tuple(j["overrides"]): htp_figures(j["record"]) for j in summary["jobs"]
                           if "target=qnn_htp" in " ".join(j["overrides"])}
        direct = {}
        for quant in grid["quant"]:
            record = run_json("run", *BASE, "perf=none", f"quant={quant}", "target=qnn_htp",
                              "export.shapes.dynamic=false", "--store", str(tmp / "direct"),
                              "--outputs", str(tmp / "out"), "--name", quant)
            direct[quant] = htp_figures(record)
    print("tiny_bert, 4-job sweep quant=w8a8,w8a16 x target=cpu,qnn_htp, fresh stores")
    for executor, jobs, exports, wall in rows:
        print(f"  {executor:<5} {jobs} jobs: {exports} export step(s) run (goal 1), {wall:.1f} s")
    print("  qnn_htp graphs: fixed from the free-axes export | exported with fixed shapes")
    for overrides, (nodes, mean, low) in derived.items():
        quant = next(o.split("=", 1)[1] for o in overrides if o.startswith("quant="))
        d_nodes, d_mean, d_low = direct[quant]
        print(f"    {quant:<6} nodes {nodes} | {d_nodes}   verify cosine mean {mean:.6f} | "
              f"{d_mean:.6f}   min {low:.6f} | {d_low:.6f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executor", choices=["local", "ray"], default="local")
    parser.add_argument("--exports", action="store_true",
                        help="one export across targets: local and Ray, derived vs direct")
    args = parser.parse_args()
    if args.exports:
        exports_main()
        return
    if args.executor == "ray":
        ray_main()
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        sweep = [*BASE, f"quant={','.join(QUANTS)}", f"target={','.join(TARGETS)}"]
        merged = cli("run", "-m", *sweep, "--store", str(tmp / "merged"), "--sweep-dir",
                     str(tmp / "sweep"), "--quiet")
        runs = [cli("run", *BASE, f"quant={q}", f"target={t}", "--store", str(tmp / "separate"),
                    "--outputs", str(tmp / "out"), "--quiet")
                for q, t in itertools.product(QUANTS, TARGETS)]
        separate = sum(runs)
        cached = sorted(cli("run", "-m", *sweep, "--store", str(tmp / "merged"), "--sweep-dir",
                            str(tmp / f"again{i}"), "--quiet") for i in range(3))[1]
        plan_1000 = cli("plan", "-m", "model=tiny_bert", "quant=w8a8,w8a16,w8a16_pc,fp16",
                        "target=cpu,qnn_htp", "export.shapes.sequence_length=range(16,141)",
                        "--store", str(tmp / "plan"), "-o", str(tmp / "plan.txt"))
        print("tiny_bert, 6-job sweep (quant x target), fresh stores")
        print(f"  merged (modelplan run -m, -j cores)   {merged:7.2f} s")
        print(f"  6 separate modelplan run commands     {separate:7.2f} s  "
              f"({' '.join(f'{r:.2f}' for r in runs)})")
        print(f"  ratio merged/separate                 {merged / separate:7.2f}  (goal <= 0.45)")
        print(f"  merged again, everything cached       {cached:7.2f} s  (goal <= 3 s; perf reruns)")
        print(f"plan a 1,000-job sweep (plan -m)        {plan_1000:7.2f} s  (goal <= 20 s)")
        print_timeline(tmp / "sweep", merged)


if __name__ == "__main__":
    main()
