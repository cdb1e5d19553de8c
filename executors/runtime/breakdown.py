"""Where the time goes, per module: profiled node names mapped back to the hierarchy tags of the
graph they came from, and per-node times summed up the module tree.

A runtime rarely runs the graph it was given: ONNX Runtime fuses and renames nodes when it
creates a session, and the QNN EP names its ops after the nodes it was built from, with
suffixes of its own. A profiled name is mapped, in order, by: its own name (`name`); a tensor
it writes that a tagged node wrote (`output`); the longest tagged node name it starts with
(`prefix`); a graph input it is named after (`input`); the common module of its neighbours in
the profiled graph, or in the profile's op order (`neighbours`); else it stays unattributed.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import TAG_KEY
from executors.onnx.hierarchy import common_tag, prefixes

NODE_TAGS = "node_tags.json"  # the tags of the graph an EPContext model was compiled from


def graph_tags(graph: Any) -> dict[str, str]:
    """node name -> hierarchy tag, for the nodes of `graph` that carry one."""
    out = {}
    for n in graph.node:
        tag = next((p.value for p in n.metadata_props if p.key == TAG_KEY), None)
        if tag is not None:
            out[n.name] = tag
    return out


def model_tags(model_dir: Path, graph: Any) -> dict[str, str]:
    """The tags of a model's nodes: its own, or those of the graph it was compiled from."""
    own = graph_tags(graph)
    if own or not (model_dir / NODE_TAGS).is_file():
        return own
    return json.loads((model_dir / NODE_TAGS).read_text())["nodes"]


def longest_prefix(name: str, known: dict[str, str]) -> str | None:
    """The tag of the longest known node name that `name` starts with."""
    for end in range(len(name) - 1, 0, -1):
        if name[:end] in known:
            return known[name[:end]]
    return None


def map_graph(profiled: Any, source: Any, tags: dict[str, str]) -> dict[str, tuple[str, str]]:
    """(tag, how) for each node of `profiled` (ONNX Runtime's optimized graph) that can be
    traced to a tagged node of `source` (the graph the session was created from)."""
    wrote = {o: tags[n.name] for n in source.node if n.name in tags for o in n.output if o}
    nodes = list(profiled.node)
    out: dict[str, tuple[str, str]] = {}
    for n in nodes:
        by_output = next((wrote[o] for o in n.output if o in wrote), None)
        if n.name in tags:
            out[n.name] = (tags[n.name], "name")
        elif by_output is not None:
            out[n.name] = (by_output, "output")
        elif (found := longest_prefix(n.name, tags)) is not None:
            out[n.name] = (found, "prefix")
    producer = {o: n.name for n in nodes for o in n.output if o}
    users: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        for x in n.input:
            users[x].append(n.name)
    near = {n.name: [producer[x] for x in n.input if x in producer]
            + [u for o in n.output for u in users.get(o, [])] for n in nodes}
    _spread(out, [n.name for n in nodes], near)
    return out


def map_sequence(names: list[str], tags: dict[str, str],
                 inputs: dict[str, str]) -> dict[str, tuple[str, str]]:
    """(tag, how) for op names in execution order, as an EP's profile lists them (no graph):
    by name, prefix, graph input, then the ops before and after it."""
    out: dict[str, tuple[str, str]] = {}
    for name in names:
        if name in tags:
            out[name] = (tags[name], "name")
        elif (found := longest_prefix(name, tags)) is not None:
            out[name] = (found, "prefix")
        elif (found := longest_prefix(name, inputs)) is not None:
            out[name] = (found, "input")
    near = {n: [names[j] for j in (i - 1, i + 1) if 0 <= j < len(names)]
            for i, n in enumerate(names)}
    _spread(out, names, near)
    return out


def _spread(out: dict[str, tuple[str, str]], names: list[str],
            near: dict[str, list[str]]) -> None:
    """Give unmapped names the common module of their mapped neighbours, to a fixed point."""
    changed = True
    while changed:
        changed = False
        for name in names:
            if name in out:
                continue
            found = common_tag([out[m][0] for m in near[name] if m in out])
            if found is not None:
                out[name] = (found, "neighbours")
                changed = True


def input_tags(graph: Any, tags: dict[str, str]) -> dict[str, str]:
    """graph input name -> the common module of the tagged nodes that read it."""
    readers: dict[str, list[str]] = defaultdict(list)
    for n in graph.node:
        for x in n.input:
            if n.name in tags:
                readers[x].append(tags[n.name])
    return {i.name: t for i in graph.input if (t := common_tag(readers.get(i.name, [])))}


def model_inputs(model_dir: Path, graph: Any, tags: dict[str, str]) -> dict[str, str]:
    """graph input -> module, from the graph itself or from what compile recorded."""
    found = input_tags(graph, tags)
    if found or not (model_dir / NODE_TAGS).is_file():
        return found
    return json.loads((model_dir / NODE_TAGS).read_text()).get("inputs", {})


def write_node_tags(model_dir: Path, graph: Any, compiled_from: str) -> None:
    """Record the tags of the graph a model is compiled from, beside the compiled model."""
    tags = graph_tags(graph)
    data = {"format_version": 1, "compiled_from": compiled_from, "nodes": tags,
            "inputs": input_tags(graph, tags)}
    (model_dir / NODE_TAGS).write_text(json.dumps(data, indent=1, sort_keys=True))


def module_rows(per_node: dict[str, float], mapped: dict[str, tuple[str, str]],
                tags: dict[str, str], total: float, unit: str = "ms") -> list[dict[str, Any]]:
    """One row per module (every tag and its ancestors), in tree order: its node count and
    time, its own and with everything below it, and its share of `total`."""
    own: dict[str, float] = defaultdict(float)
    for name, value in per_node.items():
        if name in mapped:
            own[mapped[name][0]] += value
    counts = Counter(p for t in tags.values() for p in prefixes(t))
    inclusive: dict[str, float] = defaultdict(float)
    for tag, value in own.items():
        for p in prefixes(tag):
            inclusive[p] += value
    rows = []
    for tag in sorted(set(counts) | set(inclusive), key=lambda t: t.strip("/").split("/")):
        rows.append({"tag": tag, "depth": tag.count("/"), "nodes": counts.get(tag, 0),
                     unit: round(inclusive.get(tag, 0.0), 6),
                     f"self_{unit}": round(own.get(tag, 0.0), 6),
                     "percent": round(100.0 * inclusive.get(tag, 0.0) / total, 3)
                     if total > 0 else None})
    return rows


def coverage(per_node: dict[str, float], mapped: dict[str, tuple[str, str]],
             total: float, unit: str = "ms") -> dict[str, Any]:
    """How much of the measured total the rows account for, and how names were mapped."""
    how: dict[str, float] = defaultdict(float)
    for name, value in per_node.items():
        how[mapped[name][1] if name in mapped else "unattributed"] += value
    attributed = sum(v for k, v in how.items() if k != "unattributed")
    return {f"attributed_{unit}": round(attributed, 6),
            f"unattributed_{unit}": round(how.get("unattributed", 0.0), 6),
            "coverage_percent": round(100.0 * attributed / total, 2) if total > 0 else 0.0,
            "mapped_by_percent": {k: round(100.0 * v / total, 2) if total > 0 else 0.0
                                  for k, v in sorted(how.items())}}
