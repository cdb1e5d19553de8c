"""quantize with quant.search=auto: the repair search. Quantize; on the CPU, compare the QDQ graph
with the float graph it was made from on the verify inputs (verify's cosine: the gate, a proxy
the search can afford on every candidate, also for an NPU target); while the gate fails, raise
the precision of the block (a layer's attention or MLP part: blocks()) whose own error is the
largest (its piece's SQNR fed the fp32 values of its dequantized inputs, executors/onnx/
own_error.py): 8-bit activations to 16-bit, then weights to 16-bit where the target's
profile allows, then float; quantize again. The config's own quant.overrides come after the
search's rules, so they win. Stops when the gate holds, or fails naming what it tried when
nothing is left to raise.

Candidates stay inside this step (the last one is its output): store entries are made and
vouched for by the step wrapper (observed facts, manifest), so a candidate is not published as
one; each candidate's metrics carry the key the plain config `quant.overrides=[...]` would
give its quantize step, so a pinned search result is checked against the plan."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from executors.diagnosis import module_error as A
from executors.onnx import mixed_precision as mp
from executors.onnx import quantizer as Q
from executors.onnx.artifacts import MODEL, load
from executors.onnx.iospecs import io_specs
from executors.run.step_api import StepContext, StepResult
from executors.samples import Samples, valid_positions
from executors.steps.verify import cosines, vectors
from planner.core.mixed_precision import as_override
from planner.core.ops import bits
from planner.core.targets import of_params, reference

# one step up; 4-bit weights go to w8a16_pc's 8-bit weights, which every target takes
WIDE = {"uint8": "uint16", "int8": "int16", "int4": "uint8"}
# ops that move data: a module owning only these between its children is not a block
MOVES = frozenset({*A.QDQ_OPS, "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze",
                   "Identity", "Cast", "Expand", "Shape", "Concat", "Slice"})
FIX = ("lower verify.threshold, start from a wider quant (quant=w8a16_pc), or pin "
       "quant.overrides yourself")


def run(ctx: StepContext) -> StepResult:
    t0 = time.perf_counter()
    gate = ctx.params["search"]
    found, calibration = staged(ctx, wide=True)
    try:
        reference = load(found.path)  # the float graph it quantizes, weights read in
        feeds = Samples(io_specs(found.path)[0], "verify",
                        source=ctx.inputs.get("source")).feeds(gate["samples"])
        wanted = _outputs(found.path, feeds)
        rules = [dict(r) for r in ctx.params.get("overrides", [])]
        raised: dict[str, dict[str, Any]] = {}
        path: list[dict[str, Any]] = []
        while True:
            metrics = quantize_or_fail(ctx, found, list(raised.values()) + rules, ctx.out / MODEL)
            cosine = _gate(ctx.out / MODEL, feeds, wanted)
            said = {"cosine_mean": cosine, "key": pinned_key(ctx, list(raised.values()) + rules)}
            path[-1:] = [{**path[-1], **said}] if path else [{"raised": None, **said}]
            ctx.progress(f"  search: candidate {len(path)}: cosine_mean {cosine:.4f} "
                         f"(gate {_aim(gate)})")
            if cosine >= gate["threshold"] + gate.get("margin", 0.0):
                break
            worst = _worst(ctx, found, reference, feeds, raised)
            if worst is None:
                raise ctx.fail(_exhausted(path, gate), FIX, where="quant.search")
            tag, rule, loss = worst
            ctx.progress(f"  search: raising {tag} to {_said(rule)} (own SQNR "
                         f"{loss['own_sqnr_db']} dB)")
            raised[tag] = rule
            path.append({"raised": tag, "to": _said(rule), **loss})
    finally:
        Q.unstage(found)
    final = list(raised.values()) + rules
    pin = as_override(final)
    ctx.progress(f"  search: gate holds; pin it with {pin}")
    return StepResult(metrics={**calibration, **metrics, "search": {
        "gate": gate, "path": path, "candidates": len(path), "overrides": final, "pin": pin,
        "proxy": "cosine on the CPU against the float graph it quantizes",
        "wall_s": round(time.perf_counter() - t0, 1)}})


def staged(ctx: StepContext, wide: bool = False) -> tuple[Q.Staged, dict[str, Any]]:
    """The staged float model with its calibration feeds, and the calibration's metrics."""
    p = ctx.params
    src = ctx.input_model()
    specs, _ = io_specs(src)
    n = p["calibration"]["samples"]
    samples = Samples(specs, "calibration", source=ctx.inputs.get("source"))
    feeds = samples.feeds(n)
    ctx.progress(f"  calibrating on {n} sample(s) ({p['calibration']['method']}): "
                 f"{samples.origin}")
    if samples.random:
        ctx.progress("  warning: calibration: random (the model has no preprocessor for "
                     "some inputs); quantization ranges may not match real data")
    # the quantizer reads a path; keep it inside the build dir
    found = Q.stage(src, ctx.out / ".float.onnx", p, feeds, ctx.inputs.get("hierarchy"), wide,
                    "never" if wide else p.get("layerwise", "auto"))
    return found, {"calibration_samples": n,
                   "calibration": "random" if samples.random else "real",
                   "calibration_data": samples.origin}


def quantize_or_fail(ctx: StepContext, found: Q.Staged, rules: list[dict[str, Any]],
                     out: Any) -> dict[str, Any]:
    try:
        return Q.quantize_to(found, rules, out)
    except mp.SelectionError as exc:
        raise ctx.fail(str(exc), "fix the rule's selector (modelplan diagnose lists the "
                       "modules)", where="quant.overrides") from None


def pinned_key(ctx: StepContext, found: list[dict[str, Any]]) -> str:
    """The key of the quantize step a plan with these rules as `quant.overrides` (and no
    search) has: where the pinned result is built."""
    from planner.core import mixed_precision as planned
    from planner.core.keys import content_key, tool_versions
    from planner.core.ops import OPS

    params = {k: v for k, v in ctx.params.items() if k not in ("search", "overrides")}
    if found:
        params["overrides"] = planned.rules({"overrides": found})
    roles = ["model", "source"] + (["hierarchy"] if planned.needs_hierarchy(params) else [])
    inputs = {r: ctx.inputs[r].name for r in roles}
    return content_key("quantize", params, inputs, tool_versions(OPS["quantize"].tools))


def _outputs(path: Path, feeds: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    sess = _session(path)
    names = [o.name for o in sess.get_outputs()]
    return [sess.run(names, feed) for feed in feeds]


def _session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=[reference().provider])


def _gate(path: Path, feeds: list[dict[str, np.ndarray]],
          wanted: list[list[np.ndarray]]) -> float:
    """verify's cosine_mean of the candidate against the float graph, on the CPU."""
    sess = _session(path)
    names = [o.name for o in sess.get_outputs()]
    every: list[float] = []
    for feed, want_all in zip(feeds, wanted, strict=True):
        valid = valid_positions(feed)
        for got, want in zip(sess.run(names, feed), want_all, strict=True):
            g, w = vectors(got, want, valid)
            every += cosines(g, w).tolist()
    return float(np.mean(every))


def _worst(ctx: StepContext, found: Q.Staged, reference: Any, feeds: list[dict[str, Any]],
           raised: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any], dict] | None:
    """The block with the worst own error that can still be raised, its next rule and its
    own SQNR; None when every block is as high as it goes."""
    from executors.onnx import hierarchy as H
    from executors.onnx.artifacts import TAG_KEY, set_meta

    candidate = load(ctx.out / MODEL)
    meta = _sidecar(ctx)
    for node, (tag, _how) in zip(candidate.graph.node, H.assign(candidate.graph, meta),
                                 strict=True):
        set_meta(node, TAG_KEY, tag)
    for row in own_losses(reference, candidate, feeds):
        rule = _next(row["tag"], raised.get(row["tag"]), found.params)
        if rule is not None:
            return row["tag"], rule, {"own_sqnr_db": round(row["own_sqnr_db"], 2)}
    return None


def blocks(qdq: Any) -> list[str]:
    """The modules a search raises: those whose own nodes compute (not only move data between
    children), below the root, with no such module above them (BertIntermediate with its GELU,
    not the GELU alone; BertLayer's attention and MLP parts, not the layer)."""
    owners = {A.node_tag(n) for n in qdq.graph.node if n.op_type not in MOVES}
    owners.discard(A.UNTAGGED)
    root = min(owners, key=len) if owners else ""
    inner = owners - {root}
    return sorted(m for m in inner if not any(a in inner for a in A.lineage(m)[:-1]))


def own_losses(fp32: Any, qdq: Any, feeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks, worst own error first: tag and own SQNR (dB). A block's own error reads its
    inputs dequantized: their Q/DQ quantize at the producer's type, which raising the block does
    not change (in the whole graph a block's error is mostly inherited and amplified, so a
    difference of the whole graph's SQNRs cannot tell which block to raise)."""
    rows = []
    for piece in A.own_pieces(fp32, qdq, feeds, blocks(qdq), inputs="dequantized"):
        own = A.own_fields(piece, 0.0)["own_sqnr_db"]
        if own is not None:  # a piece that did not run is not ranked
            rows.append({"tag": piece.tag, "own_sqnr_db": own})
    return sorted(rows, key=lambda r: r["own_sqnr_db"])


def _sidecar(ctx: StepContext) -> dict[str, Any]:
    import json

    from executors.onnx.artifacts import SIDECAR

    return json.loads((ctx.inputs["hierarchy"] / SIDECAR).read_text())


def _next(tag: str, now: dict[str, Any] | None, p: dict[str, Any]) -> dict[str, Any] | None:
    """One step up the ladder: 16-bit activations, 8-bit weights from 4-bit ones, 16-bit
    weights (where the profile allows), float; None at the top."""
    now = now or {"modules": [tag]}
    if now.get("precision") == "float":
        return None
    act = now.get("activation_type", p["activation_type"])
    if act in WIDE:
        return {**now, "activation_type": WIDE[act]}
    weight = now.get("weight_type", p["weight_type"])
    if weight in WIDE and (bits(WIDE[weight]) < 16 or of_params(p).qdq.weights_16bit):
        return {**now, "weight_type": WIDE[weight]}
    return {"modules": [tag], "precision": "float"}


def _said(rule: dict[str, Any]) -> str:
    if rule.get("precision") == "float":
        return "float"
    return ", ".join(f"{k.removesuffix('_type')} {v}" for k, v in rule.items() if k.endswith("_type"))


def _aim(gate: dict[str, Any]) -> str:
    """The gate as the progress line says it: the threshold, and the target's margin."""
    margin = gate.get("margin", 0.0)
    return f"{gate['threshold']}" + (f" + {margin} for the target" if margin else "")


def _exhausted(path: list[dict[str, Any]], gate: dict[str, Any]) -> str:
    tried = "; ".join(f"{p['raised']} -> {p['to']}: {p['cosine_mean']:.4f}"
                      for p in path if p["raised"]) or "nothing (no module to raise)"
    return (f"the search left nothing to raise and cosine_mean stays below verify.threshold "
            f"{_aim(gate)} (first candidate {path[0]['cosine_mean']:.4f}; tried {tried})")
