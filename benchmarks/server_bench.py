"""The build server (planner/cli/server.py) against in-process commands, in one run, each
command timed whole as a user runs it (`python -m planner.cli.main ...`):

1. a fully cached tiny_bert CPU run (`--json`; the build made once before);
2. `plan` of the default config (the packaged MiniLM for QNN HTP);
3. the MiniLM fp32 CPU build with fusions (winml-cli's default cpu build: optim=transformer,
   512 tokens, hierarchy tags), each from a fresh store, and with --winml VENV winml-cli 0.4.0's
   build of the same checkpoint beside it.

"cold" is MODELPLAN_SERVER=0 (every command imports and starts what it needs); "warm" goes
through a server started once, before the timed commands (the time it takes to become ready
is printed too). Medians of --runs runs, interleaved cold and warm.

Run: python benchmarks/server_bench.py [--runs N] [--winml VENV] [--only cached plan minilm]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from build_bench import FUSIONS, TINY_CPU, WINML_DEFAULT, winml_build

from planner.cli import server

LAST_INSIDE: list[float] = []  # the last command's own time (MODELPLAN_TIMINGS), if it said


def command(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "planner.cli.main", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    said = [line for line in done.stderr.splitlines() if line.startswith("modelplan-timings ")]
    LAST_INSIDE[:] = [json.loads(said[-1].split(" ", 1)[1])["total_s"]] if said else []
    return wall, done.stdout


def start_server(env: dict[str, str]) -> float:
    """Start a server and wait until it answers; seconds until then."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "planner.cli.main", "server", "start"], cwd=ROOT,
                   env=env, check=True)
    folder = Path(env["XDG_CACHE_HOME"]) / "modelplan" / "server"
    while not list(folder.glob("*.pid")):
        if time.perf_counter() - t0 > 600:
            log = "".join(p.read_text() for p in folder.glob("*.log"))
            sys.exit(f"the server did not start; its log:\n{log}")
        time.sleep(0.05)
    return time.perf_counter() - t0


def median(values: list[float]) -> float:
    return statistics.median(values)


def compare(name: str, args: list[str], runs: int, cold: dict[str, str],
            warm: dict[str, str], fresh: Path | None = None) -> tuple[dict[str, float], str]:
    """Cold and warm medians, and the last command's output."""
    walls: dict[str, list[float]] = {"cold": [], "warm": []}
    inside: dict[str, list[float]] = {"cold": [], "warm": []}
    out = ""
    for i in range(runs):
        for mode, env in (("cold", cold), ("warm", warm)):
            extra = []
            if fresh is not None:
                store = fresh / f"{mode}-{i}"
                extra = ["--store", str(store / "store"), "--outputs", str(store / "out")]
            wall, out = command([*args, *extra], env)
            walls[mode].append(wall)
            inside[mode] += LAST_INSIDE
            if fresh is not None:
                shutil.rmtree(fresh / f"{mode}-{i}", ignore_errors=True)
    c, w = median(walls["cold"]), median(walls["warm"])
    print(f"{name:<46} cold {c:6.2f} s  warm {w:6.2f} s  warm/cold {w / c:5.2f}  "
          f"(cold {', '.join(f'{x:.2f}' for x in walls['cold'])}; "
          f"warm {', '.join(f'{x:.2f}' for x in walls['warm'])})")
    if inside["cold"] and inside["warm"]:
        print(f"{'  of which the command itself (main)':<46} cold {median(inside['cold']):6.2f} s"
              f"  warm {median(inside['warm']):6.2f} s  (the rest: interpreter or client, "
              "imports, fork, exit)")
    return {"cold": c, "warm": w}, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--winml", type=Path, default=WINML_DEFAULT)
    ap.add_argument("--only", nargs="*", default=["cached", "plan", "minilm"])
    opts = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="mpsb", dir="/tmp"))  # short: the socket's path
    tmp = Path(tempfile.mkdtemp(prefix="server-bench-"))
    base = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT),
            "HF_HUB_OFFLINE": "1"}
    cold, warm = {**base, "MODELPLAN_SERVER": "0"}, {**base, "MODELPLAN_SERVER": "1"}
    try:
        print(f"server ready after {start_server(warm):.1f} s (imports, a first compose)")
        if "cached" in opts.only:
            store = ["--store", str(tmp / "tiny"), "--outputs", str(tmp / "tiny-out")]
            _, out = command(["run", *TINY_CPU, *store, "--json", "--quiet"], cold)
            assert {s["action"] for s in json.loads(out)["steps"]} <= {"run", "elided"}
            timed = {"MODELPLAN_TIMINGS": "1"}
            got, _ = compare("tiny_bert CPU run, fully cached (--json)",
                             ["run", *TINY_CPU, *store, "--json", "--quiet"], opts.runs,
                             {**cold, **timed}, {**warm, **timed})
            print(f"  a fully cached run: in place {got['cold']:.2f} s, through the server "
                  f"{got['warm']:.2f} s (goal <= 0.25 s; medians of {opts.runs})")
        if "plan" in opts.only:
            compare("plan of the default (MiniLM, w8a16, QNN HTP)",
                    ["plan", "--store", str(tmp / "plan")], opts.runs, cold, warm)
        if "minilm" in opts.only:
            got, out = compare("MiniLM fp32 CPU build, fusions (fresh store)",
                               ["run", *FUSIONS, "--json", "--quiet"], opts.runs, cold, warm,
                               fresh=tmp / "minilm")
            resolve = next(s for s in json.loads(out)["steps"] if s["id"] == "resolve")
            winml(opts, got, Path(resolve["metrics"]["checkpoint"]), tmp)
    finally:
        for s in server.servers(cache / "modelplan" / "server"):
            os.kill(s["pid"], signal.SIGTERM)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def winml(opts: argparse.Namespace, got: dict[str, float], checkpoint: Path, tmp: Path) -> None:
    if not (opts.winml / "bin" / "winml").exists():
        print(f"  winml-cli: not installed at {opts.winml} (--winml VENV); no ratio")
        return
    walls = []
    for i in range(opts.runs):
        out = tmp / f"winml-{i}"
        out.mkdir()
        config_s, build_s = winml_build(opts.winml, checkpoint, out)
        walls.append(config_s + build_s)
    w = median(walls)
    print(f"  winml-cli 0.4.0 config + build: median {w:.2f} s; modelplan/winml-cli: cold "
          f"{got['cold'] / w:.2f}x, warm {got['warm'] / w:.2f}x (goal <= 0.30x)")


if __name__ == "__main__":
    main()
