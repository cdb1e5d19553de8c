"""The ORT optimized-model cache on a graph with an ONNX `Loop`: a greedy decode loop exported
by PyTorch as one graph (encoder, then a `Loop` whose body runs the decoder and an argmax).

Graphs with Loop/If subgraphs are why the cache has an `.ort` tier (ORT has failed to reload
its own optimized `.onnx` of such graphs). This builds a tiny random BART (d_model 32, 2+2
layers, vocabulary 1000), traces its encoder and its uncached decoder (the prefix padded to a
fixed length), scripts a `for` loop over them and exports it with the TorchScript exporter
(opset 17): the trip count is an input, so the loop stays a `Loop` rather than being unrolled.
It then checks the graph generates PyTorch's tokens, opens it three times through
`session_cache.cpu_session` on a fresh cache (tier, seconds), times plain sessions, and says
whether ORT reloads its own optimized `.onnx` of the graph. Prints a summary and writes JSON.

    .venv/bin/python benchmarks/loop_cache_bench.py [--out FILE] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONFIG = {"vocab_size": 1000, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
          "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 64,
          "decoder_ffn_dim": 64, "max_position_embeddings": 128,
          "init_std": 0.5}  # large enough that the argmax varies with the input
LENGTH, SOURCE = 8, 6  # decoder positions (start token + 7 generated), encoder tokens
STEPS = LENGTH - 1


def tiny_bart(seed: int = 0) -> Any:
    import torch
    import transformers

    torch.manual_seed(seed)
    return transformers.BartForConditionalGeneration(transformers.BartConfig(**CONFIG)).eval()


def greedy_module(model: Any, with_encoder: bool = True) -> Any:
    """A scripted greedy loop over the traced decoder (after the traced encoder, or reading
    encoder states as an input): `(input_ids or states, steps)` -> the decoder ids (start
    token, then one argmax per step, pad after)."""
    import torch

    from executors.generation.modules import graph_module
    from planner.models.roles import role_of

    cfg = model.config
    enc = graph_module(model, role_of("encoder"), ["input_ids"], ["last_hidden_state"])
    dec = graph_module(model, role_of("decoder"), ["input_ids", "encoder_hidden_states"],
                       ["logits"])
    ids = torch.randint(4, cfg.vocab_size, (1, SOURCE))
    prefix = torch.full((1, LENGTH), cfg.pad_token_id, dtype=torch.long)
    with torch.no_grad():
        traced_enc = torch.jit.trace(enc, (ids,)) if with_encoder else torch.nn.Identity()
        traced_dec = torch.jit.trace(dec, (prefix, enc(ids)))
    from executors.steps.generate_loop import loop_classes

    loop, _masked = loop_classes()  # the plan's own loop (export.generate_loop), unmasked
    return torch.jit.script(loop(traced_enc, traced_dec, int(cfg.decoder_start_token_id),
                                 int(cfg.pad_token_id), LENGTH))


def torch_greedy(model: Any, ids: np.ndarray, steps: int = STEPS) -> np.ndarray:
    """PyTorch's own greedy loop on the eager model (no tracing, no scripting)."""
    import torch

    cfg = model.config
    out = torch.full((1, LENGTH), cfg.pad_token_id, dtype=torch.long)
    out[0, 0] = cfg.decoder_start_token_id
    with torch.no_grad():
        for i in range(steps):
            logits = model(input_ids=torch.from_numpy(ids), decoder_input_ids=out,
                           use_cache=False).logits
            out[0, i + 1] = logits[0, i].argmax(-1)
    return out.numpy()


def export_loop(model: Any, path: Path, with_encoder: bool = True) -> Path:
    """The TorchScript exporter's graph of `greedy_module` (its first input is `input_ids`
    with the encoder in the graph, `encoder_hidden_states` without)."""
    import torch

    source = torch.randint(4, model.config.vocab_size, (1, SOURCE)) if with_encoder \
        else torch.randn(1, SOURCE, model.config.d_model)
    first = "input_ids" if with_encoder else "encoder_hidden_states"
    torch.onnx.export(greedy_module(model, with_encoder), (source, torch.tensor(STEPS)),
                      str(path), input_names=[first, "steps"], output_names=["tokens"],
                      dynamo=False, opset_version=17)
    return path


def encoder_states(model: Any, ids: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model.get_encoder()(torch.from_numpy(ids)).last_hidden_state.numpy()


def loop_facts(path: Path) -> dict[str, Any]:
    """What the graph holds: its Loop nodes and where the weights live."""
    import onnx

    proto = onnx.load(str(path))
    loops = [n for n in proto.graph.node if n.op_type == "Loop"]
    bodies = [a.g for n in loops for a in n.attribute if a.name == "body"]
    return {"loops": len(loops), "outer_nodes": len(proto.graph.node),
            "outer_initializers": len(proto.graph.initializer),
            "body_nodes": sum(len(b.node) for b in bodies),
            "body_initializers": sum(len(b.initializer) for b in bodies),
            "body_constants": sum(n.op_type == "Constant" for b in bodies for n in b.node)}


def generate(session: Any, source: np.ndarray, steps: int = STEPS) -> np.ndarray:
    """Run the loop graph: the source (ids or encoder states) and the trip count."""
    first = session.get_inputs()[0].name
    return session.run(None, {first: source, "steps": np.array(steps, np.int64)})[0]


def plain_session(path: Path) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ort_self_reload(path: Path, work: Path) -> dict[str, Any]:
    """Can ORT load the optimized `.onnx` it writes for this graph? (The question behind the
    cache's `.ort` tier: "initializer name is not unique" on Loop graphs.)"""
    import onnxruntime as ort

    saved = work / "ort_optimized.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(saved)
    so.log_severity_level = 3
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    back = ort.SessionOptions()
    back.log_severity_level = 3
    try:
        ort.InferenceSession(str(saved), back, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - the failure is the measurement
        return {"reloads": False, "error": str(exc).strip()}
    return {"reloads": True, "error": "", "optimized_facts": loop_facts(saved)}


def timed(make: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    made = make()
    return made, round(time.perf_counter() - t, 4)


def cache_runs(path: Path, cache: Path, source: np.ndarray,
               opens: int = 3) -> list[dict[str, Any]]:
    """Open `path` through the session cache `opens` times: tier, detail, seconds, tokens, and
    the reason the cache gave when it demoted the model (its hint or sentinel file)."""
    from executors.runtime.session_cache import DISABLED, HINT_ORT, cpu_session

    runs = []
    for _ in range(opens):
        (session, info), seconds = timed(lambda: cpu_session(path, cache))
        notes = [f.read_text() for slot in cache.iterdir() for f in
                 (slot / HINT_ORT, slot / DISABLED) if f.is_file()]
        runs.append({"state": info.state, "detail": info.detail, "session_s": seconds,
                     "demoted_because": notes[0] if notes else "",
                     "tokens": generate(session, source).tolist()})
    return runs


def median_s(make: Any, runs: int) -> float:
    return float(np.median([timed(make)[1] for _ in range(runs)]))


def measure(model: Any, work: Path, with_encoder: bool, runs: int) -> dict[str, Any]:
    """One variant of the loop graph: export, tokens against PyTorch, ORT's own reload of its
    optimized .onnx, three cache opens, then median warm-cache and plain session times."""
    from executors.runtime.session_cache import cpu_session

    name = "encoder_loop" if with_encoder else "decoder_loop"
    work = work / name
    work.mkdir(parents=True, exist_ok=True)
    path, t_export = timed(lambda: export_loop(model, work / f"{name}.onnx", with_encoder))
    ids = np.random.default_rng(0).integers(4, CONFIG["vocab_size"], (1, SOURCE), np.int64)
    source = ids if with_encoder else encoder_states(model, ids)
    expected = torch_greedy(model, ids)
    got = generate(plain_session(path), source)
    cache = work / "session_cache"
    opened = cache_runs(path, cache, source)
    return {"graph": name, "export_s": t_export, "facts": loop_facts(path),
            "torch_tokens": expected.tolist(), "ort_tokens": got.tolist(),
            "tokens_match": bool(np.array_equal(got, expected)),
            "ort_self_reload": ort_self_reload(path, work), "cache": opened,
            "median_plain_session_s": median_s(lambda: plain_session(path), runs),
            "median_warm_cache_session_s": median_s(lambda: cpu_session(path, cache), runs)}


def summary(r: dict[str, Any]) -> str:
    f, back = r["facts"], r["ort_self_reload"]
    lines = [(f"{r['graph']}: {f['loops']} Loop, outer {f['outer_nodes']} nodes / "
             f"{f['outer_initializers']} initializers, body {f['body_nodes']} nodes / "
             f"{f['body_initializers']} initializers"),
             f"  tokens match PyTorch: {r['tokens_match']} {r['ort_tokens']}",
             f"  ORT reloads its own optimized .onnx: {back['reloads']} {back['error']}"]
    for i, run in enumerate(r["cache"], 1):
        same = run["tokens"] == r["torch_tokens"]
        lines.append(f"  cache open {i}: {run['state']:<10} {run['session_s']:.4f} s  "
                     f"tokens match: {same}")
    lines.append(f"  median session s: plain ORT_ENABLE_ALL {r['median_plain_session_s']:.4f}, "
                 f"warm cache {r['median_warm_cache_session_s']:.4f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "loop_cache.json")
    ap.add_argument("--work", type=Path, default=None, help="keep the graph and cache here")
    ap.add_argument("--runs", type=int, default=9, help="sessions per median")
    args = ap.parse_args()
    import onnxruntime as ort
    import torch

    model = tiny_bart()
    result: dict[str, Any] = {"onnxruntime": ort.__version__, "torch": torch.__version__,
                              "config": CONFIG, "decoder_length": LENGTH, "graphs": []}
    with tempfile.TemporaryDirectory(prefix="loop-cache-") as tmp:
        work = args.work or Path(tmp)
        for with_encoder in (True, False):
            result["graphs"].append(measure(model, work, with_encoder, args.runs))
            print(summary(result["graphs"][-1]))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
