"""Do the onnxruntime-genai stages of a qnn_htp bundle build and run across causal-LM families?

For each model type given (default: sixteen of transformers' causal-LM families), builds a tiny
random-weight checkpoint (`model=tiny_random`, hidden 32, 2 layers) for QNN HTP in `w8a16_pc`
(prefill 8, context 32), then prints:
* whether the plan made the genai stages, and verify_generation's figures for the bundle's own
  pair and for the stages against PyTorch (token agreement, logits cosine);
* onnxruntime-genai 0.18's greedy tokens on the QNN plugin EP (the HTP simulator) for two
  prompts, beside `modelplan generate --genai`'s runner over the same stages, and whether they
  are the same.

Run: python benchmarks/genai_families.py [--out DIR] [--clients PYTHON] [TYPE ...]
(PYTHON: the clients' environment with onnxruntime-genai, `.venv-clients/bin/python` by default)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLIENTS = ROOT / ".venv-clients" / "bin" / "python"
OPEN_FOLDER = ROOT / "tests" / "clients" / "open_folder.py"
FAMILIES = ("llama", "qwen2", "qwen3", "gpt2", "gemma", "mistral", "granite", "olmo", "phi",
            "gpt_neox", "opt", "smollm3", "bloom", "falcon", "gptj", "stablelm")
PROMPTS = [[5, 17, 30, 42, 9], [7]]
NEW_TOKENS = 6


def build(model_type: str, root: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", "model=tiny_random",
                           f"model.random_init.model_type={model_type}",
                           "model.task=text-generation", "export.shapes.prefill_length=8",
                           "export.shapes.context_length=32", "target=qnn_htp",
                           "quant=w8a16_pc", "perf=none", "--store", str(root / "store"),
                           "--outputs", str(root / model_type), "--json"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return {"failed": lines[-1] if lines else f"exit {done.returncode}"}
    return json.loads(done.stdout)


def genai_tokens(folder: Path, clients: Path) -> list[list[int]] | str:
    import onnxruntime_qnn

    done = subprocess.run([str(clients), str(OPEN_FOLDER), "genai", str(folder),
                           json.dumps(PROMPTS), str(NEW_TOKENS),
                           str(onnxruntime_qnn.get_library_path())],
                          capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    got = json.loads(lines[-1]) if lines else {"error": done.stderr.strip()[-300:]}
    return got.get("error") or [run["tokens"] for run in got["runs"]]


def stage_tokens(folder: Path) -> list[list[int]]:
    from executors.generation import bundle, pipeline
    from planner.core.targets import of_params

    described = bundle.read(folder)
    runs_on = described["runs_on"]
    runner = pipeline.stage_graphs(folder, described, of_params(runs_on),
                                   runs_on["provider_options"])
    return [runner.greedy(ids, NEW_TOKENS).tokens for ids in PROMPTS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("types", nargs="*", default=list(FAMILIES))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--clients", type=Path, default=CLIENTS)
    args = ap.parse_args()
    if not args.clients.is_file():
        raise SystemExit(f"genai_families: no {args.clients}; run `make clients` or give "
                         "--clients PYTHON of an environment with onnxruntime-genai")
    root = args.out or Path(tempfile.mkdtemp(prefix="genai_families_"))
    same = 0
    for model_type in args.types:
        start = time.perf_counter()
        record = build(model_type, root)
        if "failed" in record:
            print(f"{model_type}: build failed: {record['failed']}", flush=True)
            continue
        steps = {s["id"]: s for s in record["steps"]}
        check = steps.get("verify_generation", {}).get("metrics", {})
        staged = check.get("genai_stages", {})
        folder = Path(record["published"]["bundle.json"]).parent
        # a step that made no stages (graphs with recurrent states) says so in its metrics
        made = steps.get("genai_stages", {}).get("metrics", {}).get("stages")
        theirs = genai_tokens(folder, args.clients) if made else "no stages"
        mine = stage_tokens(folder) if made else []
        same += theirs == mine
        print(f"{model_type}: {time.perf_counter() - start:.0f} s; pair agreement "
              f"{check.get('token_agreement', 0):.3f} cosine {check.get('cosine_mean', 0):.4f}; "
              f"stages agreement {staged.get('token_agreement', 0):.3f} cosine "
              f"{staged.get('cosine_mean', 0):.4f}; genai {theirs} "
              f"{'=' if theirs == mine else '!='} modelplan --genai {mine}", flush=True)
    print(f"genai's tokens = modelplan generate --genai's for {same} of {len(args.types)} types")


if __name__ == "__main__":
    main()
