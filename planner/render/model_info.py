"""`modelplan inspect`: what the planner knows of a model before anything is exported: the
detected task and class, the graphs with their input and output specs, the export settings.
With --hierarchy, the module tree and node counts of a random-weight trace (run by the
executor plugin, which owns torch)."""

from __future__ import annotations

from typing import Any

from planner.core.lower import build_facts
from planner.models import specs as S
from planner.models import tasks as T


def describe(config: dict[str, Any]) -> dict[str, Any]:
    known = build_facts(config)
    info, task = known["info"], known["task"]
    mt = T.model_type_of(info)
    ex = config["export"]
    model_class = known["model_class"]
    auto = T.TASKS[task].auto_class if task else None
    return {
        "model": config["model"]["name"], "source": config["model"]["source"],
        "path": str(known["where"]) if known["where"] else None,
        "model_type": info.get("model_type"), "task": task, "modality": known["modality"],
        "model_class": model_class, "loaded_with": model_class or auto,
        "position_limit": S.position_limit(info, mt) if task else None,
        "graphs": known["graphs"],
        "export": {k: ex[k] for k in ("exporter", "opset", "hierarchy")},
        "digest": known["digest"],
    }


def _spec_line(spec: dict[str, Any]) -> str:
    shape = "x".join(str(d) for d in spec.get("shape", [])) or "?"
    where = f" ({spec['kind']})" if spec.get("kind") else ""
    rng = f" in [{spec['min']}, {spec['max']}]" if "min" in spec else ""
    return f"{spec['name']}: {spec.get('dtype', 'float32')}[{shape}]{rng}{where}"


def render(d: dict[str, Any]) -> str:
    lines = [f"model      {d['model']} ({d['source']}{', ' + d['path'] if d['path'] else ''})",
             f"type       {d['model_type'] or 'ONNX file'}"]
    if d["task"]:
        cls = d["model_class"] or f"{d['loaded_with']} (the Auto class picks it at run time)"
        lines += [f"task       {d['task']} ({d['modality']})", f"class      {cls}"]
    if d["position_limit"]:
        lines.append(f"positions  up to {d['position_limit']} tokens")
    ex = d["export"]
    lines.append(f"export     {ex['exporter']}, opset {ex['opset']}, hierarchy "
                 f"{'on' if ex['hierarchy'] else 'off'}")
    for graph, spec in d["graphs"].items():
        if spec is None:
            lines.append("graph      the ONNX file as it is (no export)")
            continue
        lines.append(f"graph      {graph}")
        lines += [f"  input    {_spec_line(s)}" for s in spec["inputs"]]
        lines += [f"  output   {name}" for name in spec["outputs"]]
    if d.get("hierarchy"):
        lines += ["", "Module hierarchy (nodes per module, from a random-weight trace):"]
        lines += render_tree(d["hierarchy"])
    return "\n".join(lines) + "\n"


def render_tree(tree: dict[str, Any]) -> list[str]:
    """`{graph: {tag: nodes}}` as indented trees, nodes counted with their submodules."""
    lines = []
    for graph, counts in tree.items():
        if len(tree) > 1:
            lines.append(f"{graph}:")
        totals: dict[str, int] = {}
        for tag, n in counts.items():
            parts = tag.strip("/").split("/")
            for i in range(1, len(parts) + 1):
                key = "/" + "/".join(parts[:i])
                totals[key] = totals.get(key, 0) + n
        for tag in sorted(totals):
            depth = tag.count("/") - 1
            own = counts.get(tag, 0)
            mine = f" ({own} own)" if own and own != totals[tag] else ""
            lines.append(f"  {'  ' * depth}{tag.rsplit('/', 1)[-1]}  {totals[tag]}{mine}")
    return lines
