"""Does onnxruntime-genai 0.18 run a fixed-shape language model bundle through its
`decoder-pipeline` with its default cache of a fixed length (one past/present buffer of the
context's slots per layer, each stage giving back the whole buffer: Olive's StaticLLM layout)?

Builds a tiny llama with `export.shapes.dynamic=false` for the CPU (fp32) and for QNN HTP
(w8a16_pc), wraps each bundle's prefill and decode graphs (for HTP: the QDQ graphs before
`compile`) as two stage graphs, a prompt stage and a token stage, that write their new entries
into the fixed buffer at genai's `past_seq_len`, writes a decoder-pipeline genai_config.json
beside them, and runs genai 0.18 greedy on the CPU EP (and, with --htp, over the stages
compiled for the QNN HTP EP on the QNN plugin EP). Prints genai's tokens beside `modelplan
generate`'s on the bundle and PyTorch's, and every error genai gave, and what genai does when
one thing in the config or the stages changes.

A qnn_htp build now delivers these stages itself (the genai_stages step:
executors/generation/stages.py makes them; this probe uses it), compiled, named in the bundle's
genai_config.json; the probe keeps the CPU EP's and the variants' measurements.

Run: python benchmarks/genai_pipeline_probe.py [--out DIR] [--htp] [--clients PYTHON]
(PYTHON: the clients' environment with onnxruntime-genai, `.venv-clients/bin/python` by default)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = ROOT / ".venv-clients" / "bin" / "python"  # `make clients`: genai 0.18
LENGTHS = ["export.shapes.prefill_length=8", "export.shapes.context_length=32",
           "export.shapes.dynamic=false"]


def _stage(graph: Path, out: Path, kind: str, slots: int) -> None:
    """The prefill (`kind` prompt) or decode (token) graph as a stage of genai's pipeline, as
    the genai_stages step makes it (executors/generation/stages.py)."""
    from executors.generation import stages as product

    model = onnx.load(str(graph), load_external_data=False)
    onnx.save(product.stage(model, slots), str(out))


def _config(bundle: Path, folder: Path, slots: int, window: int,
            provider_options: list[dict]) -> None:
    """genai's decoder-pipeline config over the two stages, from the bundle's own config."""
    from executors.generation import genai as product
    from executors.generation.stages import FILES

    own = json.loads((bundle / "genai_config.json").read_text())["model"]
    dec = own["decoder"]
    session = {"provider_options": provider_options}
    config = {"model": {
        **{k: own[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id", "vocab_size")},
        "type": "decoder-pipeline", "context_length": slots,
        "decoder": {
            **{k: dec[k] for k in ("num_hidden_layers", "head_size", "num_key_value_heads",
                                   "num_attention_heads", "hidden_size")},
            "session_options": session,
            **product.pipeline_section(dec["num_hidden_layers"], FILES, window,
                                      session)}},
        "search": {"do_sample": False, "num_beams": 1, "max_length": slots, "min_length": 0,
                   "past_present_share_buffer": True}}
    (folder / "genai_config.json").write_text(json.dumps(config, indent=2))


RUNNER = r'''
import json, sys
import onnxruntime_genai as og
folder, prompts, max_length, qnn = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if qnn:  # the QNN plugin EP's library, from modelplan's environment
    og.register_execution_provider_library("QNNExecutionProvider", qnn)
out = {"version": og.__version__, "runs": []}
try:
    model = og.Model(folder)
    for ids in prompts:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=max_length)
        generator = og.Generator(model, params)
        generator.append_tokens(ids)
        tokens = []
        while not generator.is_done():
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        out["runs"].append({"prompt_ids": ids, "tokens": tokens,
                            "sequence": [int(t) for t in generator.get_sequence(0)]})
except RuntimeError as exc:
    out["error"] = " ".join(str(exc).split())
print(json.dumps(out))
'''


def _qnn_library() -> str:
    import onnxruntime_qnn

    return str(onnxruntime_qnn.get_library_path())


def genai(folder: Path, prompts: list[list[int]], max_length: int, qnn: bool,
          clients: Path = CLIENTS) -> dict:
    """genai 0.18 in the clients' environment, greedy over each prompt up to `max_length`
    (genai's sequence holds the prompt padded to the window)."""
    done = subprocess.run([str(clients), "-c", RUNNER, str(folder), json.dumps(prompts),
                           str(max_length), _qnn_library() if qnn else ""],
                          capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"error": f"exit {done.returncode}: " + " | ".join(done.stderr.strip().splitlines()[-3:])}
    return json.loads(lines[-1])


def build(store: Path, outputs: Path, *overrides: str) -> dict:
    """A CLI build; its run record."""
    done = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", "model=tiny_random",
                           "model.random_init.model_type=llama", *LENGTHS, *overrides,
                           "perf=none", "--store", str(store), "--outputs", str(outputs),
                           "--json"], cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode:
        raise SystemExit(f"build {' '.join(overrides)} failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def outputs_of(record: dict, step_id: str) -> dict:
    return next(s for s in record["steps"] if s["id"] == step_id)["outputs"]


def modelplan_tokens(folder: Path, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """`modelplan generate`'s runner on the bundle (its own graphs, its EP), fed token ids."""
    from executors.generation import bundle
    from planner.core.targets import of_params

    described = bundle.read(folder)
    runs_on = described["runs_on"]
    runner = bundle.lm_graphs(folder, described, of_params(runs_on), runs_on["provider_options"])
    eos = bundle.eos_ids(folder)
    return [runner.greedy(ids, new_tokens, eos).tokens for ids in prompts]


def torch_tokens(checkpoint: Path, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint)).eval()
    eos = json.loads((checkpoint / "config.json").read_text()).get("eos_token_id")
    out = []
    with torch.no_grad():
        for ids in prompts:
            got = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens,
                                 do_sample=False, eos_token_id=eos, pad_token_id=0)
            out.append(got[0, len(ids):].tolist())
    return out


def stages(bundle: Path, prefill: Path, decode: Path, folder: Path, qnn: list[dict]) -> Path:
    """The pipeline folder: the two stage graphs beside the bundle's files (their weights)."""
    shutil.copytree(bundle, folder, dirs_exist_ok=True)
    slots, window = (json.loads((bundle / "bundle.json").read_text())[k]
                     for k in ("context_length", "prefill_length"))
    _stage(prefill, folder / "prompt_stage.onnx", "prompt", slots)
    _stage(decode, folder / "token_stage.onnx", "token", slots)
    _config(bundle, folder, slots, window, qnn)
    return folder


def compare(label: str, got: dict, want: dict[str, list[list[int]]]) -> None:
    if "error" in got:
        print(f"  {label}: genai {got.get('version', '')} error: {got['error']}")
        return
    for i, run in enumerate(got["runs"]):
        same = {k: run["tokens"] == v[i][:len(run["tokens"])] for k, v in want.items()}
        print(f"  {label} prompt {run['prompt_ids']}: genai {run['tokens']} "
              + " ".join(f"{k} {v[i]} ({'same' if same[k] else 'differs'})"
                         for k, v in want.items()))



def variants(folder: Path, prompt: list[int], n: int, window: int, want: list[int],
             clients: Path) -> None:
    """What genai does with the fp32 stages when one thing in the config or the graphs changes."""
    def edit(config: dict, path: tuple[str, ...], value: object) -> None:
        *parents, last = path
        for key in parents:
            config = config[key]
        if value is None:
            del config[last]
        else:
            config[last] = value

    window_path = ("model", "decoder", "sliding_window")
    cases = {"search.past_present_share_buffer false":
             (("search", "past_present_share_buffer"), False, prompt),
             "sliding_window.alignment right": ((*window_path, "alignment"), "right", prompt),
             "no sliding_window": (window_path, None, prompt),
             "the pad token (0) inside the prompt": ((), None, [5, 0, 300, 42]),
             "max_length over context_length": ((), None, prompt),
             "stages without total_seq_len": ((), None, prompt)}
    for label, (path, value, ids) in cases.items():
        copy = folder.parent / f"{folder.name}-variant"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)
        config = json.loads((copy / "genai_config.json").read_text())
        if path:
            edit(config, path, value)
        (copy / "genai_config.json").write_text(json.dumps(config))
        if label.startswith("stages without"):
            for stage in ("prompt_stage.onnx", "token_stage.onnx"):
                model = onnx.load(str(copy / stage), load_external_data=False)
                model.graph.input.remove(next(i for i in model.graph.input
                                              if i.name == "total_seq_len"))
                onnx.save(model, str(copy / stage))
        length = config["model"]["context_length"] + 8 if label.startswith("max_length") \
            else window + n
        reference = modelplan_tokens(folder, [ids], n)[0] if ids != prompt else want
        compare(f"variant: {label}", genai(copy, [ids], length, False, clients),
                {"modelplan": [reference]})
        shutil.rmtree(copy)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--htp", action="store_true", help="also the QNN HTP build (slow)")
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--clients", type=Path, default=CLIENTS,
                    help="python of an environment with onnxruntime-genai 0.18 (make clients)")
    args = ap.parse_args()
    if not args.clients.is_file():
        raise SystemExit(f"genai_pipeline_probe: no {args.clients}; run `make clients` or give "
                         "--clients PYTHON of an environment with onnxruntime-genai")
    root = args.out or Path(tempfile.mkdtemp(prefix="genai_pipeline_"))
    store = root / "store"
    prompts = [[5, 17, 300, 42, 9], [7], [11, 22, 33, 44, 55, 66, 77, 88]]
    longer = [[11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 122]]  # genai feeds it as two windows
    n = args.new_tokens

    def run(label: str, folder: Path, ids: list[list[int]], qnn: bool,
            want: dict[str, list[list[int]]]) -> None:
        start = time.perf_counter()
        length = -(-max(len(p) for p in ids) // window) * window + n  # padded to the window
        compare(label, genai(folder, ids, length, qnn, args.clients), want)
        print(f"  ({time.perf_counter() - start:.1f} s, sessions included)")

    start = time.perf_counter()
    cpu = build(store, root / "out", "target=cpu", "quant=none")
    bundle = Path(cpu["published"]["bundle.json"]).parent
    window = json.loads((bundle / "bundle.json").read_text())["prefill_length"]
    print(f"CPU fp32 build: {time.perf_counter() - start:.1f} s ({bundle})")
    checkpoint = Path(outputs_of(cpu, "resolve")["source.json"]).parent / "checkpoint"
    want = {"torch": torch_tokens(checkpoint, prompts, n),
            "modelplan": modelplan_tokens(bundle, prompts, n)}
    folder = stages(bundle, bundle / "prefill_model.onnx", bundle / "decode_model.onnx",
                    root / "pipe-cpu", [])
    run("genai CPU EP, fp32 stages", folder, prompts, False, want)
    run("genai CPU EP, a prompt of two windows", folder, longer, False,
        {"torch": torch_tokens(checkpoint, longer, n)})
    variants(folder, prompts[0], n, window, want["modelplan"][0], args.clients)
    if not args.htp:
        return
    start = time.perf_counter()
    htp = build(store, root / "out", "target=qnn_htp", "quant=w8a16_pc")
    bundle = Path(htp["published"]["bundle.json"]).parent
    print(f"QNN HTP w8a16_pc build: {time.perf_counter() - start:.1f} s ({bundle})")
    qdq = [Path(outputs_of(htp, f"{g}.tag")["model.onnx"]) for g in ("prefill", "decode")]
    start = time.perf_counter()
    want = {"torch": want["torch"], "modelplan-htp": modelplan_tokens(bundle, prompts, n)}
    print(f"  modelplan generate's runner on the HTP bundle: {time.perf_counter() - start:.1f} s")
    folder = stages(bundle, *qdq, root / "pipe-qdq", [])
    run("genai CPU EP, QDQ stages", folder, prompts, False, want)
    options = {k: str(v) for k, v in
               json.loads((bundle / "bundle.json").read_text())["runs_on"]["provider_options"]
               .items()}
    start = time.perf_counter()
    compiled, counts = qnn_compile(folder, root / "pipe-htp", options)
    print(f"  stages compiled for QNN HTP ({options}) in {time.perf_counter() - start:.1f} s: "
          f"{counts}")
    run("genai QNN plugin EP, compiled stages", compiled, prompts, True, want)
    run("genai QNN plugin EP, a prompt of two windows", compiled, longer, True,
        {"torch": torch_tokens(checkpoint, longer, n),
         "modelplan-htp": modelplan_tokens(bundle, longer, n)})


def qnn_compile(qdq: Path, folder: Path, options: dict[str, str]) -> tuple[Path, str]:
    """The QDQ stages compiled for QNN HTP (EPContext, one context binary each, CPU fallback
    off: every node on the HTP or the compile fails), in a folder with genai's config naming
    them and the QNN EP; the node counts of the compiled stages."""
    from executors.runtime import shared_context as sc
    from planner.core.targets import named

    models = sc.compile_group(named("qnn_htp"), [qdq / "prompt_stage.onnx",
                                                 qdq / "token_stage.onnx"],
                              folder, options, share=False)
    config = json.loads((qdq / "genai_config.json").read_text())
    qnn = [{"qnn": {"backend_type": "htp", **options}}]
    decoder = config["model"]["decoder"]
    decoder["session_options"] = {"provider_options": qnn}
    for stage, model in zip(decoder["pipeline"][0].values(), models, strict=True):
        stage["filename"], stage["session_options"] = model.name, {"provider_options": qnn}
    (folder / "genai_config.json").write_text(json.dumps(config, indent=2))
    counts = []
    for model in models:
        ops = [n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node]
        counts.append(f"{model.name}: {len(ops)} node(s), {ops.count('EPContext')} EPContext")
    return folder, "; ".join(counts)


if __name__ == "__main__":
    main()
