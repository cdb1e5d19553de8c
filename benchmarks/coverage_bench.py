"""Coverage: every model type and task, tiny random weights, built for CPU fp32 and for QNN HTP
w8a16_pc, through the real CLI. Prints a Markdown table (model type, task, CPU fp32 ok, QNN HTP
ok, cosine vs fp32, tags %, nodes per EP) and, with --write-docs, puts it in docs/configs.md.

    python benchmarks/coverage_bench.py [--only vit,bart] [--write-docs] [--store DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- coverage:begin -->", "<!-- coverage:end -->"

# (model type, task): one row per model type with its main task, and every task at least once
ROWS: tuple[tuple[str, str], ...] = (
    ("bert", "feature-extraction"), ("bert", "fill-mask"), ("roberta", "text-classification"),
    ("xlm-roberta", "token-classification"), ("distilbert", "question-answering"),
    ("mpnet", "sentence-similarity"), ("electra", "question-answering"),
    ("deberta-v2", "zero-shot-classification"), ("modernbert", "fill-mask"),
    ("layoutlm", "token-classification"),
    ("vit", "image-classification"), ("dinov2", "image-feature-extraction"),
    ("beit", "image-classification"), ("swin", "image-classification"),
    ("swinv2", "image-classification"), ("convnext", "image-classification"),
    ("resnet", "image-classification"), ("mobilevit", "image-classification"),
    ("segformer", "image-segmentation"), ("dpt", "depth-estimation"),
    ("depth_anything", "depth-estimation"), ("yolos", "object-detection"),
    ("rt_detr", "object-detection"), ("vitpose", "keypoint-detection"),
    ("owlvit", "zero-shot-object-detection"), ("owlv2", "zero-shot-object-detection"),
    ("clip", "zero-shot-image-classification"), ("clip", "feature-extraction"),
    ("clip", "image-feature-extraction"),
    ("wav2vec2", "automatic-speech-recognition"), ("hubert", "audio-classification"),
    ("audio-spectrogram-transformer", "audio-classification"),
    ("marian", "text2text-generation"), ("bart", "text2text-generation"),
    ("vision-encoder-decoder", "image-to-text"),
)
COMMON = ("model=tiny_random", "verify.samples=2")


def run(args: list[str], store: Path, outputs: Path) -> tuple[dict[str, Any] | None, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", *args, "--store",
                           str(store), "--outputs", str(outputs), "--json", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    record = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    err = next((ln.removeprefix("modelplan: error: ") for ln in proc.stderr.splitlines()
                if ln.startswith("modelplan: error")), "")
    return record, err, time.perf_counter() - t0


def metric(record: dict[str, Any] | None, op: str, name: str) -> list[Any]:
    if record is None:
        return []
    return [s["metrics"][name] for s in record["steps"]
            if s["op"] == op and s["status"] == "ok" and name in s["metrics"]]


def tags_percent(record: dict[str, Any] | None) -> str:
    cov = metric(record, "export", "coverage")
    return "/".join(f"{c['percent']:.0f}" for c in cov) if cov else "-"


def row(model_type: str, task: str, store: Path, outputs: Path) -> dict[str, Any]:
    base = [*COMMON, f"model.random_init.model_type={model_type}", f"model.task={task}"]
    cpu, cpu_err, cpu_s = run([*base, "quant=none", "target=cpu", "perf=none"], store, outputs)
    htp, htp_err, htp_s = run([*base, "quant.calibration.samples=8", "perf.iterations=2",
                               "perf.warmup=0"], store, outputs)
    eps = metric(htp, "perf", "nodes_by_ep")
    return {"model_type": model_type, "task": task,
            "cpu": "ok" if cpu and cpu["status"] == "ok" else f"FAIL: {cpu_err}",
            "htp": "ok" if htp and htp["status"] == "ok" else f"FAIL: {htp_err}",
            "cosine": metric(htp, "verify", "cosine_mean") or metric(htp, "verify", "cosine_min"),
            "cosine_failed": htp_err if "cosine_mean" in htp_err else "",
            "tags": tags_percent(htp or cpu),
            "eps": eps, "seconds": round(cpu_s + htp_s, 1)}


def cell_cosine(r: dict[str, Any]) -> str:
    if r["cosine"]:
        return " / ".join(f"{c:.4f}" for c in r["cosine"])
    if r["cosine_failed"]:
        return r["cosine_failed"].split("cosine_mean ")[1].split(" ")[0] + " (below 0.99)"
    return "-"


def cell_eps(r: dict[str, Any]) -> str:
    return "; ".join(", ".join(f"{ep.removesuffix('ExecutionProvider')} {n}"
                               for ep, n in sorted(e.items())) for e in r["eps"]) or "-"


def reason(status: str) -> str:
    """A failed build in a table cell: which step failed and why, without store paths."""
    if status == "ok":
        return status
    text = re.sub(r"step (\S+) \((\S+)\) failed on \S+: ", r"\1: ", status.removeprefix("FAIL: "))
    if "offending node(s): " in text:
        nodes = text.split("offending node(s): ")[1].split(";")[0]
        kinds = sorted(set(re.findall(r"\((\w+)\)", nodes)))
        return f"FAIL {text.split(':')[0]}: HTP rejects nodes ({', '.join(kinds)})"
    return "FAIL " + text.split(";")[0].split(" (cosine_min")[0][:160].replace("|", "\\|")


def table(rows: list[dict[str, Any]]) -> str:
    header = ("| model type | task | CPU fp32 | QNN HTP w8a16_pc | cosine vs fp32 (HTP) | "
              "tags % | nodes per EP (HTP) |")
    lines = [header, "|---|---|---|---|---|---|---|"]
    for r in rows:
        htp, cpu = reason(r["htp"]), reason(r["cpu"])
        lines.append(f"| {r['model_type']} | {r['task']} | {cpu} | {htp} | {cell_cosine(r)} | "
                     f"{r['tags']} | {cell_eps(r)} |")
    return "\n".join(lines) + "\n"


def write_docs(text: str) -> None:
    readme = ROOT / "docs" / "configs.md"
    body = readme.read_text()
    start, end = body.index(BEGIN) + len(BEGIN), body.index(END)
    readme.write_text(body[:start] + "\n" + text + body[end:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated model types")
    p.add_argument("--store", help="store to use (default: a fresh temporary one)")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--from-json", metavar="FILE", help="render rows measured before")
    a = p.parse_args()
    if a.from_json:
        text = table(json.loads(Path(a.from_json).read_text()))
        sys.stdout.write(text)
        if a.write_docs:
            write_docs(text)
        return 0
    wanted = set(a.only.split(",")) if a.only else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(a.store) if a.store else Path(tmp) / "store"
        for model_type, task in ROWS:
            if wanted and model_type not in wanted:
                continue
            # one outputs folder per row: each run publishes its deliverable under its name
            r = row(model_type, task, store, Path(tmp) / "out" / f"{model_type}-{task}")
            print(f"{model_type:<32} {task:<32} cpu {r['cpu'][:60]:<60} htp {r['htp'][:80]} "
                  f"{cell_cosine(r)} ({r['seconds']} s)", file=sys.stderr, flush=True)
            rows.append(r)
    text = table(rows)
    sys.stdout.write(text)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    if a.write_docs:
        write_docs(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
