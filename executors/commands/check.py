"""`modelplan check OUTDIR`: whether a deliverable loads with the runtime present. Its runtime
manifest (runtime.json) is compared with the versions installed here: a difference is one line
naming both versions and the command that rebuilds for this runtime (exit 2). Otherwise each
graph is loaded in a child process of its own, so a crash in the execution provider is reported
rather than inherited, and each says ok with its load time (exit 1 when one does not load)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from executors.publish import runtime_manifest
from planner.core.targets import reference
from planner.errors import UsageError

LOAD_TIMEOUT_S = 600


def add_command(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sp = sub.add_parser("check", parents=[common],
                        help="check that a deliverable loads with the runtime present: its "
                        "runtime manifest against the installed versions, then each graph "
                        "loaded in a child process")
    sp.add_argument("outdir", metavar="OUTDIR",
                    help="the deliverable's folder (outputs/NAME/)")
    sp.add_argument("--json", action="store_true", help="print what was found as JSON")
    sp.set_defaults(handler=cmd_check)


def compare(folder: Path) -> dict[str, Any]:
    """The folder's manifest; UsageError (exit 2, one line) when this runtime differs."""
    found = runtime_manifest.read(folder)
    line = runtime_manifest.mismatch(folder, found)
    if line:
        raise UsageError(line)
    return found


def cmd_check(args: argparse.Namespace) -> int:
    folder = Path(args.outdir).absolute()
    found = compare(folder)
    rows = [{"graph": name, "runs_on": g["runs_on"], **load(folder, name, found)}
            for name, g in sorted(found["graphs"].items()) if g["runs_on"] != "device"]
    skipped = sorted(n for n, g in found["graphs"].items() if g["runs_on"] == "device")
    failed = [r for r in rows if not r["ok"]]
    if args.json:
        print(json.dumps({"folder": str(folder), "runtime": found, "loads": rows,
                          "not_loaded": skipped}, indent=2))
        return 1 if failed else 0
    for r in rows:
        where = found["provider"] if r["runs_on"] == "target" else "the host CPU"
        print(f"ok    {r['graph']}  loaded on {where} in {r['load_s']:.2f} s" if r["ok"] else
              f"FAIL  {r['graph']}  on {where}: {r['error']}")
    for name in skipped:
        print(f"skip  {name}  (the shared-context set is for the device; the bundle says "
              "whether it loads here)")
    sdk = found.get("sdk")
    versions = ", ".join([f"{k} {v}" for k, v in sorted(found["packages"].items())] +
                         ([f"{sdk['name']} {sdk['version']}"] if sdk else []))
    print(f"Check {'failed' if failed else 'ok'}: {len(rows) - len(failed)} of {len(rows)} "
          f"graph(s) load with {versions}.")
    return 1 if failed else 0


def load(folder: Path, name: str, found: dict[str, Any]) -> dict[str, Any]:
    """Load one graph in a child process: {ok, load_s} or {ok: False, error}."""
    host = found["graphs"][name]["runs_on"] == "host"
    spec = {"path": str(folder / name), "target": reference().name if host else found["target"],
            "provider_options": {} if host else found.get("provider_options", {})}
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    try:
        done = subprocess.run([sys.executable, "-m", "executors.commands.check_load",
                               json.dumps(spec)], env=env, capture_output=True, text=True,
                              timeout=LOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"no session after {LOAD_TIMEOUT_S} s"}
    if done.returncode == 0:
        return {"ok": True, **json.loads(done.stdout.strip().splitlines()[-1])}
    how = (f"the loading process crashed with {signal.Signals(-done.returncode).name}"
           if done.returncode < 0 else "it does not load")
    said = [ln for ln in (done.stderr or "").splitlines() if ln.strip()][-1:]
    return {"ok": False, "error": how + "".join(f": {s}" for s in said)}
