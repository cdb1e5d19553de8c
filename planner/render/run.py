"""A run record for people: the table printed after `modelplan run` / `apply`, and the
run's headline results (deliverable, size, and the metrics ops declare as `Op.headline`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.core.ops import OPS
from planner.core.plan import ACTIONS, MAIN_GRAPH, graph_of
from planner.core.storelayout import WEIGHTS
from planner.models import roles
from planner.models.seq2seq import LOOP_FILE
from planner.outputs import FAILED_RECORD, record_file
from planner.render import accuracy, module_error, modules
from planner.support.units import human_bytes

MAIN_OUTPUTS = ("model.onnx", "metrics.json", "source.json")


def _main_output(step: dict[str, Any]) -> str:
    outs = step["outputs"]
    for name in MAIN_OUTPUTS:
        if name in outs:
            return outs[name]
    return next(iter(outs.values()), "")


def _show_metric(name: str, value: Any) -> str:
    fine = "cosine" in name or name.startswith("eval_")  # scores in [0, 1]-ish units
    return f"{name}={value:.4f}" if isinstance(value, float) and fine else \
        f"{name}={value:.1f}" if isinstance(value, float) else f"{name}={value}"


def note(step: dict[str, Any]) -> str:
    """A step's outcome in a few words: its status, a failed proof, or its headline metric."""
    if step["status"] != "ok":
        gate = OPS[step["op"]].gate if step["op"] in OPS else ""
        judged = gate and step["metrics"].get(gate)  # failed on its verdict: say on what
        return step["status"].upper() + (f" {_headline(step)}" if judged else "")
    pc = step["proof_check"]
    if pc is not None and not pc["held"]:
        return "proof did not hold"
    if step.get("quarantined"):
        return "rebuilt: its store entry was corrupt"
    return _headline(step)


def _headline(step: dict[str, Any]) -> str:
    """The step's first headline metric, as `name=value` (blank without one)."""
    headline = OPS[step["op"]].headline if step["op"] in OPS else ()
    shown = [m for m in headline[:1] if m in step["metrics"]]
    return _show_metric(shown[0], step["metrics"][shown[0]]) if shown else ""


def headline_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """The metrics every ok step's op declares as its headline, by name."""
    return {m: s["metrics"][m] for s in record["steps"] if s["status"] == "ok" and s["op"] in OPS
            for m in OPS[s["op"]].headline if m in s["metrics"]}


def result_summary(record: dict[str, Any]) -> dict[str, Any]:
    """Per run: the artifact, its size and the headline metrics (None where absent)."""
    model = next((p for n, p in record.get("published", {}).items() if n.endswith(".onnx")),
                 None)
    metrics = headline_metrics(record)
    names = [m for op in OPS.values() for m in op.headline]
    return {"artifact": model, "size_bytes": Path(model).stat().st_size if model else None,
            **{m: metrics.get(m) for m in names}}


def _size(model: Path) -> str:
    """The graph's size, and its weights' where they are blobs in `weights/` beside it."""
    blobs = model.parent / WEIGHTS
    if not blobs.is_dir():
        return human_bytes(model.stat().st_size)
    return (f"{human_bytes(model.stat().st_size)} graph, weights/ "
            f"{human_bytes(sum(f.stat().st_size for f in blobs.iterdir()))}")


def _deliverable(record: dict[str, Any]) -> list[str]:
    published = record.get("published", {})
    models = [(n, p) for n, p in published.items()  # a bundle's device/ set: see below
              if n.endswith(".onnx") and "/" not in n and n != LOOP_FILE]
    if not models and "bundle.json" in published:  # graphs split into parts, in folders
        models = [("bundle.json", published["bundle.json"])]
    if not models:
        return []
    return [f"Deliverable: {p} ({_size(Path(p))})" for _n, p in models] + results(record)


def results(record: dict[str, Any]) -> list[str]:
    """The deliverable's figures (verify, eval, generation, latency), without its paths."""
    lines: list[str] = _seq2seq_speed(record)
    for s in record["steps"]:
        m, graph = s["metrics"], graph_of(s["id"])
        where = "" if graph == MAIN_GRAPH else f" ({graph})"
        if s["status"] != "ok":
            continue
        lines += _generation_lines(s["id"], m)
        if "token_agreement" in m:
            continue
        if "cosine_mean" in m:
            lines.append(f"Verify{where}: cosine mean {m['cosine_mean']:.4f}, "
                         f"min {m['cosine_min']:.4f}")
        if "search" in m:  # quant.search=auto: the plain config that pins what it found
            lines.append(f"Search{where}: {m['search']['candidates']} candidate(s); pin: "
                         f"{m['search']['pin']}")
        if "cache_warm" in m:  # export.generate_loop's graph
            lines.append(f"Loop graph: {LOOP_FILE}, {m['loops']} Loop, tokens match PyTorch; "
                         f"session cache {m['cache_cold']} then {m['cache_warm']} (cold "
                         f"{m['session_cold_s']:.3f} s, warm {m['session_warm_s']:.3f} s)")
        if "latency_ms_median" in m:
            lines.append(f"Latency on {m['ep']}{where}: median {m['latency_ms_median']:.1f} ms, "
                         f"p90 {m['latency_ms_p90']:.1f} ms")
    return lines


def _seq2seq_speed(record: dict[str, Any]) -> list[str]:
    """An encoder-decoder's generation speed from its graphs' perf: the first token takes the
    encoder, the cross graph (when the decoder is cached) and one decoder step; each further
    token one decoder step."""
    ms = {graph_of(s["id"]): s["metrics"]["latency_ms_median"] for s in record["steps"]
          if s["op"] == "perf" and s["status"] == "ok" and "latency_ms_median" in s["metrics"]}
    if roles.ENCODER not in ms or roles.DECODER not in ms:
        return []
    cached = roles.CROSS in ms
    first = ms[roles.ENCODER] + ms.get(roles.CROSS, 0.0) + ms[roles.DECODER]
    step = ms[roles.DECODER]
    return [(f"Generation speed: time to first token {first:.1f} ms (encoder"
            f"{', cross' if cached else ''} and one decoder step), then "
            f"{1000 / max(step, 1e-9):.1f} tokens/s ({step:.1f} ms a token, "
            f"{'one token over the cache' if cached else 'the whole prefix'})")]


def _generation_lines(step_id: str, m: dict[str, Any]) -> list[str]:
    """A causal LM's: greedy generation against PyTorch, the decode rate, the shared context."""
    if "token_agreement" in m:
        where = "no divergence" if m["exact_prompts"] == m["prompts"] else \
            f"first divergence at token {m['first_divergence_min']} at the earliest"
        return [(f"Generation: {m['token_agreement']:.1%} of {m['new_tokens']} greedy tokens "
                 f"agree with PyTorch ({m['exact_prompts']}/{m['prompts']} prompts exactly; "
                 f"{where}), logits cosine mean {m['cosine_mean']:.4f}")]
    if "loads_here" in m:
        said = "loads here" if m["loads_here"] else \
            (f"does not load here ({m['why_not']}); modelplan generate and onnxruntime-genai "
             "run the folder's own graphs")
        return [(f"Shared context: device/ holds both graphs over one binary "
                 f"({human_bytes(m['binary_bytes'])}, the weights once); {said}")]
    role = roles.ROLES.get(graph_of(step_id) or "")
    if "latency_ms_median" in m and role is not None and role.kind is roles.Kind.DECODER_ONLY:
        if role.runs is roles.Runs.PROMPT:
            return [(f"Time to first token (a prefill pass over one window): "
                     f"{m['latency_ms_median']:.1f} ms")]
        return [(f"Decode: {1000 / max(m['latency_ms_median'], 1e-9):.1f} tokens/s "
                 f"({m['latency_ms_median']:.1f} ms a token, the decode graph alone)")]
    return []


def _counts(record: dict[str, Any]) -> dict[str, int]:
    return {a: sum(1 for s in record["steps"] if s["action"] == a and s["status"] == "ok")
            for a in ACTIONS}


def _cost(step: dict[str, Any]) -> tuple[str, str]:
    """Wall time and peak RSS of a step that ran (blank otherwise), with the plan's estimate."""
    if step["action"] != "run" or step["status"] != "ok":
        return "", ""
    planned = f" (plan ~{step['planned_peak_mb']:.0f})" if "planned_peak_mb" in step else ""
    return f"{step['wall_s']:.2f} s", f"{step['peak_rss_mb']:.0f} MB{planned}"


def table(record: dict[str, Any], limit: int | None = modules.TOP) -> str:
    rows = [("step", "action", "wall", "peak RSS", "note", "output")]
    for s in record["steps"]:
        rows.append((s["id"], s["action"] if s["status"] != "skipped" else "-", *_cost(s),
                     note(s), _main_output(s)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
             for r in rows]
    counts = _counts(record)
    lines.append("")
    lines.append(f"Run {record['status']}: {counts['run']} run, {counts['cached']} cached, "
                 f"{counts['elided']} elided in {record['wall_s']:.1f} s.")
    lines += [f"Rebuilt {s['id']}: its store entry was corrupt "
              f"({'; '.join(s['quarantined']['problems'])}); moved to "
              f"{s['quarantined']['moved_to']}" for s in record["steps"] if s.get("quarantined")]
    if record.get("published"):
        lines.extend(_deliverable(record))
    lines.extend(accuracy.text(record))
    lines.extend(module_error.record_lines(record))
    lines.extend(modules.text(record, limit))
    if record["outputs_dir"]:
        lines.append("")
        saved = record_file(record)
        kept = "" if not saved.endswith(FAILED_RECORD) else \
            " (the previous run's deliverable there was kept)" \
            if Path(saved).parent == Path(record["outputs_dir"]) else \
            " (nothing was delivered, so no outputs folder was made)"
        lines.append(f"Run record: {saved}{kept}")
    return "\n".join(lines) + "\n"


def markdown(record: dict[str, Any]) -> str:
    """The run for a pull-request comment: its steps, its results, and every module row."""
    counts = _counts(record)
    title = (f"### modelplan run — {record['status']} ({counts['run']} run, {counts['cached']} "
             f"cached, {counts['elided']} elided in {record['wall_s']:.1f} s)")
    lines = [title, "", "| step | action | wall | peak RSS | note |", "|---|---|---:|---:|---|"]
    for s in record["steps"]:
        wall, rss = _cost(s)
        action = s["action"] if s["status"] != "skipped" else "-"
        lines.append(f"| `{s['id']}` | {action} | {wall} | {rss} | {note(s)} |")
    if record.get("published"):
        lines += ["", *[f"- {line}" for line in _deliverable(record)]]
    lines.extend(accuracy.markdown(record))
    lines.extend(module_error.record_markdown(record))
    lines.extend(modules.markdown(record))
    return "\n".join(lines) + "\n"
