"""Module hierarchy tags: which torch modules ran, and which module each ONNX node belongs to.

A tag is the class path of a module, e.g. `/BertModel/BertEncoder/BertLayer.0/BertAttention`
(container lists are folded into an index on their element). torch.nn's own leaf classes
(Linear, LayerNorm, Dropout, ...) are inlined into the module that calls them unless the
export keeps them (`export.torch_modules`). Nodes are matched by their name scope: the module
itself (direct), its nearest kept ancestor (parent), or the root module (root), so coverage
is always 100 %.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

CONTAINERS = ("ModuleList", "ModuleDict", "Sequential")


def class_paths(model: Any) -> dict[str, str]:
    """attr path ("encoder.layer.0") -> class path ("/BertModel/BertEncoder/BertLayer.0")."""
    modules = dict(model.named_modules())
    out = {"": f"/{type(model).__name__}"}
    for name, module in modules.items():
        if not name:
            continue
        parent, _, leaf = name.rpartition(".")
        parent_mod = modules[parent] if parent else model
        base = out[parent]
        if type(parent_mod).__name__ in CONTAINERS:
            out[name] = f"{base.rpartition('/')[0]}/{type(module).__name__}.{leaf}"
        else:
            out[name] = f"{base}/{type(module).__name__}"
    return out


def inlined(module: Any, keep: frozenset[str] | set[str]) -> bool:
    """torch.nn's own leaf classes are folded into their caller, unless kept by class name."""
    cls = type(module)
    return cls.__module__.startswith("torch.nn.") and next(module.children(), None) is None \
        and cls.__name__ not in keep


def executed_modules(model: Any, run: Callable[[], Any],
                     keep: frozenset[str] = frozenset()) -> tuple[dict[str, str], list[str]]:
    """(attr path -> class path of every kept module whose forward ran during `run()`,
    the class names of the modules that ran but were inlined into their caller)."""
    paths = class_paths(model)
    modules = dict(model.named_modules())
    ran: set[str] = set()
    handles = [m.register_forward_pre_hook(lambda _m, _a, name=name: ran.add(name))
               for name, m in modules.items()]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    folded = {name for name in ran if name and inlined(modules[name], keep)}
    return ({name: paths[name] for name in sorted(ran - folded)},
            sorted({type(modules[name]).__name__ for name in folded}))


def unknown_classes(model: Any, names: list[str]) -> list[str]:
    """The names in `names` that are not the class of any module of `model`."""
    have = {type(m).__name__ for m in model.modules()}
    return [n for n in names if n not in have]


def rebase(scopes: dict[str, str], base: str) -> dict[str, str]:
    """Scopes relative to the submodule at attr path `base` (its node names start there);
    the tags keep the whole model's class paths."""
    if not base:
        return scopes
    return {path[len(base) + 1:] if path != base else "": tag for path, tag in scopes.items()
            if path == base or path.startswith(base + ".")}


def scope_of(node_name: str, prefix: str) -> str | None:
    """The attr path a TorchScript-exported node name belongs to, or None if it has none.

    "/model/encoder/layer.0/attention/self/query/MatMul" with prefix "model" ->
    "encoder.layer.0.attention.self.query"."""
    if not node_name.startswith("/"):
        return None
    parts = node_name.strip("/").split("/")[:-1]
    if prefix and parts[:1] == [prefix]:
        parts = parts[1:]
    return ".".join(parts)


def match(scope: str | None, scopes: dict[str, str], root: str) -> tuple[str, str]:
    """(tag, how) for a scope: direct, parent (nearest executed ancestor) or root."""
    if scope is None:
        return root, "root"
    if scope in scopes:
        return scopes[scope], "direct"
    parts = scope.split(".")
    while parts:
        parts.pop()
        if ".".join(parts) in scopes:
            return scopes[".".join(parts)], "parent" if parts else "root"
    return root, "root"


def sidecar(node_names: list[str], scopes: dict[str, str], prefix: str,
            root: str, folded: list[str] = ()) -> dict[str, Any]:
    """The export sidecar: node -> tag, the traced modules (and the classes inlined into
    them), and coverage statistics."""
    nodes = {}
    for name in node_names:
        tag, how = match(scope_of(name, prefix), scopes, root)
        nodes[name] = {"tag": tag, "match": how}
    counts = Counter(v["match"] for v in nodes.values())
    total = len(nodes)
    return {
        "format_version": 1, "root": root, "prefix": prefix, "scopes": scopes,
        "traced_modules": sorted(set(scopes.values())), "inlined_classes": list(folded),
        "nodes": nodes,
        "coverage": {"nodes": total, **{k: counts.get(k, 0) for k in ("direct", "parent", "root")},
                     "percent": 100.0 if total else 0.0},
    }


def common_tag(tags: list[str]) -> str | None:
    """The deepest module containing all `tags` (by path segments)."""
    if not tags:
        return None
    split = [t.split("/") for t in tags]
    common = os.path.commonprefix(split)
    return "/".join(common) if len(common) > 1 else None


def prefixes(tag: str) -> list[str]:
    """A tag and its ancestors, outermost first: "/A/B.0/C" -> ["/A", "/A/B.0", "/A/B.0/C"]."""
    parts = tag.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def depth(tag: str) -> int:
    return tag.strip("/").count("/") + 1


def report(meta: dict[str, Any]) -> str:
    """A Markdown summary of a sidecar, for export.report=true."""
    cov = meta["coverage"]
    per_tag = Counter(v["tag"] for v in meta["nodes"].values())
    lines = ["# Hierarchy report", "",
             (f"Nodes: {cov['nodes']} — direct {cov['direct']}, parent {cov['parent']}, "
              f"root {cov['root']} (coverage {cov['percent']:.0f} %)"), "",
             f"Traced modules: {len(meta['traced_modules'])}", "",
             "| module | nodes |", "|---|---|"]
    lines += [f"| `{tag}` | {n} |" for tag, n in sorted(per_tag.items())]
    return "\n".join(lines) + "\n"


QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


def assign(graph: Any, meta: dict[str, Any]) -> list[tuple[str, str]]:
    """(tag, how) for every node of `graph`, in node order, from the export sidecar.

    how: export (node kept its exported name), scope (its name scope matched a module),
    neighbours (a node fusion created: the common module of the real nodes around it, looking
    through Q/DQ), qdq (a Q/DQ node takes the tag of the node whose tensor it quantizes), root."""
    nodes = list(graph.node)
    producer = {out: i for i, n in enumerate(nodes) for out in n.output}
    users: dict[str, list[int]] = defaultdict(list)
    for i, n in enumerate(nodes):
        for name in n.input:
            users[name].append(i)
    tags: dict[int, tuple[str, str]] = {}
    for i, n in enumerate(nodes):
        if n.op_type in QDQ:
            continue
        if n.name in meta["nodes"]:
            tags[i] = (meta["nodes"][n.name]["tag"], "export")
        elif (scope := scope_of(n.name, meta["prefix"])) is not None:
            tags[i] = (match(scope, meta["scopes"], meta["root"])[0], "scope")
    _from_neighbours(nodes, producer, users, tags)
    for i, n in enumerate(nodes):
        if n.op_type in QDQ and (owner := _qdq_owner(i, nodes, producer, users)) in tags:
            tags[i] = (tags[owner][0], "qdq")
    return [tags.get(i, (meta["root"], "root")) for i in range(len(nodes))]


def _qdq_owner(i: int, nodes: list, producer: dict[str, int], users: dict) -> int | None:
    """The node whose tensor a Q/DQ node quantizes: its producer, else its first consumer."""
    tensor = nodes[i].input[0]
    while (p := producer.get(tensor)) is not None and nodes[p].op_type in QDQ:
        tensor = nodes[p].input[0]
    if p is not None:
        return p
    frontier = list(nodes[i].output)
    seen: set[int] = set()
    while frontier:
        for c in users.get(frontier.pop(0), []):
            if c in seen:
                continue
            seen.add(c)
            if nodes[c].op_type not in QDQ:
                return c
            frontier.extend(nodes[c].output)
    return None


def _real_neighbours(i: int, nodes: list, producer: dict[str, int], users: dict) -> list[int]:
    """Producers and consumers of node i, looking through chains of Q/DQ nodes."""
    found, seen = [], {i}
    frontier = [(x, "up") for x in nodes[i].input] + [(x, "down") for x in nodes[i].output]
    while frontier:
        tensor, way = frontier.pop()
        nexts = [producer[tensor]] if way == "up" and tensor in producer else \
            users.get(tensor, []) if way == "down" else []
        for j in nexts:
            if j in seen:
                continue
            seen.add(j)
            if nodes[j].op_type in QDQ:
                frontier += [(x, way) for x in (nodes[j].input[:1] if way == "up"
                                                 else nodes[j].output)]
            else:
                found.append(j)
    return found


def _from_neighbours(nodes: list, producer: dict[str, int], users: dict,
                     tags: dict[int, tuple[str, str]]) -> None:
    changed = True
    while changed:
        changed = False
        for i, n in enumerate(nodes):
            if i in tags or n.op_type in QDQ:
                continue
            known = [tags[j][0] for j in _real_neighbours(i, nodes, producer, users) if j in tags]
            if known and (tag := common_tag(known)):
                tags[i] = (tag, "neighbours")
                changed = True
