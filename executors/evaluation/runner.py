"""The three-way evaluation: the same rows through the PyTorch model (the baseline), the fp32
export on CPU and the deliverable on its target's EP; each model's predictions scored against
the labels (or, without labels, against PyTorch's predictions); the drop of the verdict metric
against PyTorch and the verdict against `eval.max_drop`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from executors.evaluation import data
from executors.evaluation.base import Context, Evaluator, Forward
from executors.evaluation.evaluators import evaluator
from executors.generation.modules import graph_module
from executors.onnx.artifacts import MODEL
from executors.onnx.iospecs import io_specs
from executors.runtime import torchmodel
from executors.runtime.adapters import adapter
from planner.core.targets import Target, of_params, reference
from planner.models import tasks
from planner.models.evaluation import EVAL
from planner.models.roles import role_of

MODELS = ("pytorch", "fp32_onnx", "target")
FIX = ("raise the precision (quant=w8a16_pc, or quant=fp16 where the target runs it) or, if "
       "this loss is acceptable, raise eval.max_drop")


def graph_files(folder: Path) -> dict[str, Path]:
    """The graphs of a step's output: `model.onnx`, or a bundle's `<graph>_model.onnx`."""
    if (folder / MODEL).is_file():
        return {"model": folder / MODEL}
    bundle = json.loads((folder / "bundle.json").read_text())
    entries = bundle.get("graphs", bundle)  # a causal LM's bundle also says its cache shape
    return {graph: folder / entry["model"] for graph, entry in entries.items()}


def context(task: str, source: Path, reference_graphs: dict[str, Path]) -> Context:
    info = torchmodel.source_info(source)
    ckpt = info["checkpoint_dir"]
    config = json.loads((ckpt / "config.json").read_text()) \
        if ckpt is not None and (ckpt / "config.json").is_file() else {}
    specs, outputs = {}, {}
    for graph, path in reference_graphs.items():
        ins, outs = io_specs(path)
        specs[graph], outputs[graph] = ins, [o["name"] for o in outs]
    return Context(task, specs, outputs, ckpt, config, model_class=info.get("model_class"))


def _tiled(forward: Forward, specs: list[dict[str, Any]]) -> Forward:
    """A graph exported for batch B > 1 is fed the row B times; row 0 of its outputs is kept."""
    batch = {s["name"]: int(s["shape"][0]) for s in specs if s.get("shape")}

    def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        fed = {k: np.repeat(v, batch.get(k, 1), axis=0) if batch.get(k, 1) > 1 and len(v) == 1
               else v for k, v in feed.items()}
        got = forward(fed)
        return {k: v[:1] if any(b > 1 for b in batch.values()) else v for k, v in got.items()}

    return run


def torch_graphs(source: Path, cx: Context) -> dict[str, Forward]:
    import torch

    model, _ = torchmodel.load(source)
    out: dict[str, Forward] = {}
    for graph, specs in cx.specs.items():
        names, outs = [s["name"] for s in specs], cx.outputs[graph]
        module = graph_module(model, role_of(graph, names), names, outs)

        def forward(feed: dict[str, np.ndarray], module: Any = module, names: list[str] = names,
                    outs: list[str] = outs) -> dict[str, np.ndarray]:
            with torch.inference_mode():
                got = module(*[torch.from_numpy(np.ascontiguousarray(feed[n])) for n in names])
            got = got if isinstance(got, tuple) else (got,)
            return {n: v.float().numpy() if v.is_floating_point() else v.numpy()
                    for n, v in zip(outs, got, strict=True)}

        out[graph] = _tiled(forward, specs)
    return out


def session_graphs(files: dict[str, Path], target: Target, options: dict[str, Any],
                   cache_dir: Path | None, cx: Context) -> dict[str, Forward]:
    out: dict[str, Forward] = {}
    for graph, path in files.items():
        session = adapter(target).step_session(path, target, options, cache_dir)[0]
        names = [o.name for o in session.get_outputs()]

        def forward(feed: dict[str, np.ndarray], session: Any = session,
                    names: list[str] = names) -> dict[str, np.ndarray]:
            return dict(zip(names, session.run(names, feed), strict=True))

        out[graph] = _tiled(forward, cx.specs.get(graph, []))
    return out


def evaluate(params: dict[str, Any], inputs: dict[str, Path], cache_dir: Path | None,
             say: Callable[[str], None]) -> dict[str, Any]:
    """The eval step's metrics (see the module docstring)."""
    task = params["task"]
    ref_files, cand_files = graph_files(inputs["reference"]), graph_files(inputs["candidate"])
    cx = context(task, inputs["source"], ref_files)
    modality = tasks.modality_of(cx.info, cx.model_class) if cx.info else None
    rows = data.load(params, modality)
    cx.labelled, cx.label_names = rows.labelled, rows.names
    ev: Evaluator = evaluator(task)
    prepared = ev.prepare(rows.rows, cx)
    host, target = reference(), of_params(params)
    makers = {
        "pytorch": lambda: torch_graphs(inputs["source"], cx),
        "fp32_onnx": lambda: session_graphs(ref_files, host, host.provider_options, cache_dir,
                                            cx),
        "target": lambda: session_graphs(cand_files, target, params["provider_options"],
                                         cache_dir, cx)}
    preds: dict[str, list[Any]] = {}
    seconds: dict[str, float] = {}
    for which in MODELS:
        if which == "target" and cand_files == ref_files and target == host:
            preds[which], seconds[which] = preds["fp32_onnx"], seconds["fp32_onnx"]
            continue
        graphs = makers[which]()  # one model at a time: two would hold the weights twice
        n = len(prepared.feeds)
        start = time.perf_counter()
        preds[which] = ev.predictions(
            graphs, prepared, cx, lambda i, w=which, n=n: _progress(say, w, i, n))
        seconds[which] = round(time.perf_counter() - start, 3)
        del graphs
    truth = ev.truth(prepared, cx) if rows.labelled else preds["pytorch"]
    cx.baseline = preds["pytorch"]  # agreement metrics beside labelled ones compare with it
    scores = {w: ev.score(preds[w], truth, cx) for w in MODELS}
    notes = ev.notes(cx)
    return {**verdict(params, scores, rows, seconds, len(prepared.rows)),
            **({"notes": notes} if notes else {})}


def _progress(say: Callable[[str], None], which: str, i: int, n: int) -> None:
    """About ten progress lines per model, and the last one."""
    if (i + 1) % max(1, n // 10) == 0 or i + 1 == n:
        say(f"  eval {which} {i + 1}/{n}")


def verdict(params: dict[str, Any], scores: dict[str, dict[str, float]], rows: data.Rows,
            seconds: dict[str, float], samples: int) -> dict[str, Any]:
    metric, task = params["metric"], params["task"]
    lower = metric in EVAL[task].lower_is_better
    sign = -1.0 if lower else 1.0
    base, fp32, got = (scores[w][metric] for w in MODELS)
    drop = round(sign * (base - got), 6) + 0.0  # + 0.0: no -0.0 in a verdict line
    fp32_drop = round(sign * (base - fp32), 6) + 0.0
    passed = drop <= params["max_drop"]
    against = "labels" if rows.labelled else "PyTorch's predictions"
    line = (f"{metric} on {of_params(params).name} {got:.4f} against {against} (PyTorch "
            f"{base:.4f}, fp32 ONNX {fp32:.4f}): drop {drop:.4f} is "
            f"{'within' if passed else 'above'} eval.max_drop {params['max_drop']}")
    return {"task": task, "metric": metric, "higher_is_better": not lower,
            "labelled": rows.labelled, "against": against, "data": rows.origin,
            "samples": samples, "dataset_digest": params["dataset_digest"], "scores": scores,
            "eval_pytorch": base, "eval_fp32": fp32, "eval_target": got, "eval_drop": drop,
            "eval_fp32_drop": fp32_drop, "max_drop": params["max_drop"], "ep": params["ep"],
            "target": of_params(params).name,
            "eval_verdict": "PASS" if passed else "REGRESSION", "passed": passed,
            "verdict_line": line, "seconds": seconds,
            "target_s_per_sample": round(seconds["target"] / max(samples, 1), 4),
            "regression": None if passed else f"{line} (REGRESSION); {FIX}"}
