"""The winml-cli recipe corpus through `modelplan import`: imports every recipe (timed), then
builds one imported recipe per model type with a tiny random checkpoint of that type
(`model.path=`), for the recipe's own target and precision, through the real CLI. Prints the
import table (per model type and per recipe: imported / built / unsupported, with reasons);
--write-report puts it in benchmarks/REPORT.md.

    python benchmarks/import_bench.py [--corpus DIR] [--only bert,vit] [--no-build]
                                      [--store DIR] [--write-report]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BEGIN, END = "<!-- import:begin -->", "<!-- import:end -->"
FAST = ("verify.samples=2", "perf.iterations=2", "perf.warmup=1")

def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], cwd=ROOT, text=True,
                          capture_output=True, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def import_corpus(corpus: Path, out: Path) -> tuple[list[dict[str, Any]], float]:
    t0 = time.perf_counter()
    proc = cli("import", str(corpus), "-o", str(out), "--json")
    took = time.perf_counter() - t0
    if not proc.stdout.strip().startswith("["):
        sys.exit(f"import failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout), took


def build(corpus: Path, conf: Path, entry: dict[str, Any], work: Path,
          store: Path) -> dict[str, Any]:
    """Build one imported recipe with a tiny checkpoint of its model type."""
    from tests.recipe_models import checkpoint_for

    name = entry["config_name"]
    t0 = time.perf_counter()
    try:
        ckpt = checkpoint_for([corpus / r for r in entry["recipes"]], work / f"{name}-ckpt")
    except (ImportError, OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
        return {"ok": False, "why": f"no tiny checkpoint: {type(exc).__name__}: {exc}"}
    proc = cli("run", "--config-dir", str(conf), "--config-name", name, f"model.path={ckpt}",
               *FAST, "--store", str(store), "--outputs", str(work / "outputs"), "--json",
               "--quiet")
    wall = time.perf_counter() - t0
    record = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    if proc.returncode != 0 or record is None:
        why = next((ln.removeprefix("modelplan: error: ") for ln in proc.stderr.splitlines()
                    if ln.startswith("modelplan: error")), proc.stderr.strip()[-200:])
        return {"ok": False, "why": why, "wall": wall}
    verify = next((s["metrics"] for s in record["steps"] if s["op"] == "verify"), {})
    return {"ok": True, "wall": wall, "cosine": verify.get("cosine_min")}


def main() -> None:
    from tests.recipe_models import BUILDS, corpus_dir

    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=corpus_dir(),
                    help="default: $MODELPLAN_RECIPE_CORPUS or ../shared/corpus/winml-recipes")
    ap.add_argument("--only", help="comma-separated model types to build")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--store", type=Path)
    ap.add_argument("--write-report", action="store_true")
    args = ap.parse_args()
    if args.corpus is None:
        sys.exit("no recipe corpus: pass --corpus DIR or set MODELPLAN_RECIPE_CORPUS")
    work = Path(tempfile.mkdtemp(prefix="import-bench-"))
    entries, took = import_corpus(args.corpus, work / "conf")
    files = sum(len(e["recipes"]) for e in entries)
    print(f"modelplan import of {files} recipes ({len(entries)} builds): {took:.1f} s")
    built: dict[str, dict[str, Any]] = {}
    wanted = set(args.only.split(",")) if args.only else set(BUILDS)
    for model_type, recipe in BUILDS.items():
        if args.no_build or model_type not in wanted:
            continue
        entry = next(e for e in entries if recipe in e["recipes"])
        built[recipe] = build(args.corpus, work / "conf", entry, work,
                              args.store or work / "store")
        r = built[recipe]
        print(f"  {model_type:<30} {'built' if r['ok'] else 'FAILED'} in "
              f"{r.get('wall', 0):.1f} s  {r.get('why', '')}", flush=True)
    text = report(entries, built, took, files)
    print(text)
    if args.write_report:
        write_report(text)


def report(entries: list[dict[str, Any]], built: dict[str, dict[str, Any]], took: float,
           files: int) -> str:
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        by_type[e["model_type"] or "?"].append(e)
    lines = [(f"`modelplan import` of the corpus ({files} recipe files, {len(entries)} builds): "
              f"{took:.1f} s."), "",
             "| model type | recipes | imported | unsupported | built with a tiny checkpoint |",
             "|---|---|---|---|---|"]
    for model_type, group in sorted(by_type.items()):
        n = sum(len(e["recipes"]) for e in group)
        ok = sum(len(e["recipes"]) for e in group if e["status"] == "imported")
        why = sorted({e["message"] for e in group if e["status"] != "imported"})
        lines.append(f"| {model_type} | {n} | {ok} | {n - ok}" + (f": {'; '.join(why)}"
                                                                  if why else "")
                     + f" | {_built(group, built)} |")
    return "\n".join(lines + per_recipe(entries)) + "\n"


def _built(group: list[dict[str, Any]], built: dict[str, dict[str, Any]]) -> str:
    said = []
    for e in group:
        for r in e["recipes"]:
            if r not in built:
                continue
            b, what = built[r], f"`{r}` ({e['target']}, {e['precision']})"
            if not b["ok"]:
                said.append(f"failed: {what}: {b['why']}")
                continue
            cos = f", cosine min {b['cosine']:.4f}" if b.get("cosine") is not None else ""
            said.append(f"yes: {what} in {b['wall']:.0f} s{cos}")
    if said:
        return "; ".join(said)
    return "not built (no importable recipe)" if all(e["status"] != "imported" for e in group) \
        else "not built"


def per_recipe(entries: list[dict[str, Any]]) -> list[str]:
    """One row per recipe file, as `modelplan import DIR` prints it."""
    lines = ["", "<details><summary>Per recipe</summary>", "",
             "| recipe | model id | task | target | precision | status |",
             "|---|---|---|---|---|---|"]
    for e in entries:
        status = f"imported -> `{e['config_name']}`" if e["status"] == "imported" else \
            f"{e['status']}: {e['message']}"
        lines += [f"| `{r}` | {e['model_id']} | {e['task']} | {e['target']} | {e['precision']} "
                  f"| {status} |" for r in e["recipes"]]
    return [*lines, "", "</details>"]


def write_report(text: str) -> None:
    path = ROOT / "benchmarks" / "REPORT.md"
    body = path.read_text()
    block = f"{BEGIN}\n{text}{END}"
    if BEGIN in body:
        head, _, rest = body.partition(BEGIN)
        body = head + block + rest.partition(END)[2]
    else:
        body = body.rstrip("\n") + "\n\n## `python benchmarks/import_bench.py` (the winml-cli " \
            "recipe corpus)\n\n" + block + "\n"
    path.write_text(body)


if __name__ == "__main__":
    main()
