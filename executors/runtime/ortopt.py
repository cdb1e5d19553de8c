"""ONNX Runtime graph optimization: the basic level run to a fixed point (one pass is not
always enough: on ORT 1.32 a second basic pass still rewrites a freshly exported BERT), the
transformer fusions optim.flags name, and the observations the fact checkers make with them.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import onnx

from executors.onnx.artifacts import load, load_for_rewrite, save
from executors.runtime.adapters import host_providers
from executors.store.weights import THRESHOLD, WEIGHTS, has_external, internalize, masked, unmask
from planner.core.ops import FUSIONS
from planner.errors import StepError

MAX_PASSES = 8
# flag -> onnxruntime.transformers FusionOptions attribute (matmul_add is ORT's
# MatMulAddFusion, part of the basic level, so the basic fixed point applies it)
FUSION_OPTION = {"gelu": "enable_gelu", "layer_norm": "enable_layer_norm",
                 "skip_layer_norm": "enable_skip_layer_norm", "bias_gelu": "enable_bias_gelu",
                 "attention": "enable_attention", "matmul_add": None}
# flag -> the op types its fusion creates (what one more fusion pass would add)
FUSED_OPS = {"gelu": ("Gelu", "FastGelu", "BiasGelu"), "layer_norm": ("LayerNormalization",),
             "skip_layer_norm": ("SkipLayerNormalization",), "bias_gelu": ("BiasGelu",),
             "attention": ("Attention", "MultiHeadAttention"), "matmul_add": ("Gemm",)}
WEIGHT_FUSIONS = ("attention",)  # fusions that read weight values, not only the graph
assert set(FUSION_OPTION) == set(FUSED_OPS) == set(FUSIONS)
_FIXED_POINTS: set[str] = set()  # structure digests this process saw the basic level keep
# files this process saved a fixed point to, by (path, size, mtime, inode): a fixed point
# observed once is not observed again while the file is unchanged
_FIXED_FILES: set[tuple[str, int, int, int]] = set()


def graph_digest(model: onnx.ModelProto) -> str:
    return _unordered_digest(model.graph)


def _unordered_digest(graph: onnx.GraphProto, bare: bool = False) -> str:
    """A graph's digest with its nodes, and each node's attributes, as sets: ORT orders them
    differently each time it writes a model with external data (a 2-cycle, ORT 1.32).
    bare: what optimization acts on only (value_info, doc strings and node metadata left out).
    No copy of the graph is made: each field is hashed by itself, its parts length-prefixed."""
    h = hashlib.sha256()

    def part(value: Any) -> None:
        data = value.SerializeToString(deterministic=True) if hasattr(value, "SerializeToString") \
            else str(value).encode()
        h.update(len(data).to_bytes(8, "little") + data)

    left_out = {"node"} | ({"value_info", "doc_string"} if bare else set())
    for field, value in graph.ListFields():
        if field.name in left_out:
            continue
        items = value if hasattr(value, "__len__") and not isinstance(value, (str, bytes)) \
            else [value]
        part(f"{field.name}:{len(items)}")
        for item in items:
            part(item)
    h.update(b"node")
    for node in sorted(_canonical_node(n, bare) for n in graph.node):
        h.update(len(node).to_bytes(8, "little") + node)
    return h.hexdigest()


def _canonical_node(node: onnx.NodeProto, bare: bool = False) -> bytes:
    """A node's bytes with its attributes by name (copied only if they are not in order)."""
    names = [a.name for a in node.attribute]
    if names == sorted(names) and not (bare and (node.metadata_props or node.doc_string)):
        return node.SerializeToString(deterministic=True)
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    if bare:
        del copy.metadata_props[:]
        copy.doc_string = ""
    attributes = sorted(copy.attribute, key=lambda a: a.name)
    del copy.attribute[:]
    copy.attribute.extend(attributes)
    return copy.SerializeToString(deterministic=True)


def structure_digest(model: onnx.ModelProto) -> str:
    """Digest of what optimization acts on: nodes (without their metadata), initializers,
    inputs and outputs; value_info and doc strings left out."""
    return _unordered_digest(model.graph, bare=True)


def ort_pass(src: Path, dst: Path) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    # large initializers as external data (no 2 GB limit), then as blobs: unchanged ones linked
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                f"{dst.name}.data")
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", str(THRESHOLD))
    ort.InferenceSession(str(src), so, providers=host_providers())
    model = load(dst, external=False)
    _rename_generated(model.graph, _names(load(src, external=False).graph))
    canonical_order(model.graph)
    save(model, dst)


GENERATED = "ort_basic/"  # a prefix no ONNX Runtime transformer generates names with


def _names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor's and node's name."""
    return {i.name for i in graph.initializer} | {o for n in graph.node for o in n.output} | \
        {v.name for v in graph.input} | {n.name for n in graph.node}


def _rename_generated(graph: onnx.GraphProto, before: set[str]) -> None:
    """Give the tensors and nodes a pass created (`gemm_input_shape_token_66`,
    `gemm_output_reshape_token_17`) names that ONNX Runtime does not generate: a client's
    session, optimizing the graph again with its own counters, generates the same names and
    derives initializers from them (`<node>_new_shape`), and fails when one exists already
    ("Attempt to replace the existing tensor", measured on BLIP's text decoder)."""
    taken = _names(graph)
    # generated: not the export's, and not derived from one of its names ("/model/.../MatMul/
    # MatMulAddFusion", "/..._output_0" keep theirs: hierarchy tags follow those)
    new = sorted(n for n in taken - before if n and not n.startswith(("/", GENERATED)))
    if not new:
        return
    renamed = {}
    for name in new:  # a later pass restarts ORT's counters: its names may repeat earlier ones
        fresh, k = GENERATED + name, 1
        while fresh in taken:
            fresh, k = f"{GENERATED}{name}.{k}", k + 1
        renamed[name] = fresh
        taken.add(fresh)
    for init in graph.initializer:
        init.name = renamed.get(init.name, init.name)
    for node in graph.node:
        node.input[:] = [renamed.get(x, x) for x in node.input]
        node.output[:] = [renamed.get(x, x) for x in node.output]
        node.name = renamed.get(node.name, node.name)
    for info in graph.value_info:
        info.name = renamed.get(info.name, info.name)


def canonical_order(graph: onnx.GraphProto) -> None:
    """Nodes in one topological order (ties by name), attributes and value_info by name: ORT
    reorders them each time it writes a model with external data; equal graphs, equal bytes."""
    infos = sorted(graph.value_info, key=lambda v: v.name)
    del graph.value_info[:]
    graph.value_info.extend(infos)
    known = {v.name for v in graph.input} | {i.name for i in graph.initializer} | {""}
    nodes = list(graph.node)
    waiting = {i: {x for x in n.input if x not in known} for i, n in enumerate(nodes)}
    users: dict[str, list[int]] = {}
    for i, need in waiting.items():
        for name in need:
            users.setdefault(name, []).append(i)
    ready = [(n.name, i) for i, n in enumerate(nodes) if not waiting[i]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(nodes[i])
        for out in nodes[i].output:
            for j in users.pop(out, []):
                waiting[j].discard(out)
                if not waiting[j]:
                    heapq.heappush(ready, (nodes[j].name, j))
    if len(order) != len(nodes):  # outer-scope names (subgraphs) or a cycle: keep ORT's order
        return
    for node in order:
        attributes = sorted(node.attribute, key=lambda a: a.name)
        del node.attribute[:]
        node.attribute.extend(attributes)
    del graph.node[:]
    graph.node.extend(order)


def basic_fixed_point(model: onnx.ModelProto, work: Path, src: Path | None = None,
                      internal: bool = True) -> tuple[onnx.ModelProto, int]:
    """Apply ORT basic optimizations until a pass leaves the graph's digest unchanged.
    Returns the model (with shapes inferred) and the number of passes that changed it.
    `src`: a file that already holds `model` (the first pass reads it; nothing is saved).
    internal=False: the result's weights stay blobs in `work/weights`, for the caller to save
    with base=work (linked, not read) before it removes `work`."""
    current = src if src is not None else work / "pass_0.onnx"
    if src is None:
        save(model, current)
    digest, passes = graph_digest(model), 0
    for i in range(1, MAX_PASSES + 1):
        nxt = work / f"pass_{i}.onnx"
        ort_pass(current, nxt)
        new = load(nxt, external=False)  # weights are blobs, named by content
        new_digest = graph_digest(new)
        if current != src:
            current.unlink()
        current = nxt
        if new_digest == digest:
            break
        digest, passes = new_digest, i
    else:
        raise StepError(f"ONNX Runtime's basic optimizations did not reach a fixed point in "
                        f"{MAX_PASSES} passes; set optim=none and report this model")
    result = onnx.shape_inference.infer_shapes(new, data_prop=True)
    del new
    canonical_order(result.graph)
    for meta in model.metadata_props:  # keep the model-level metadata ORT may not carry over
        if meta.key not in {p.key for p in result.metadata_props}:
            result.metadata_props.add(key=meta.key, value=meta.value)
    _FIXED_POINTS.add(structure_digest(result))
    current.unlink()
    if internal:
        internalize(result, work)  # the work dir goes, and its blobs with it
        shutil.rmtree(work / WEIGHTS, ignore_errors=True)
    return result, passes


def _file_identity(path: Path) -> tuple[str, int, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino


def save_fixed_point(model: onnx.ModelProto, path: Path, base: Path | None = None) -> None:
    """Save what basic_fixed_point returned, remembering that the file holds a fixed point (its
    last pass changed nothing), so observing `normalized` on it here costs no pass."""
    save(model, path, base)
    _FIXED_FILES.add(_file_identity(path))


def basic_pass_changes(path: Path) -> str | None:
    """What one more basic pass would change on the model at `path` (None: nothing)."""
    if _file_identity(path) in _FIXED_FILES:  # this process's fixed point loop saved it
        return None
    model = load(path, external=False)
    before = structure_digest(model)
    if before in _FIXED_POINTS:  # this process's fixed point loop just saw a pass keep it
        return None
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        out = Path(tmp) / "pass.onnx"
        ort_pass(path, out)
        after = load(out, external=False)
    if structure_digest(after) == before:
        _FIXED_POINTS.add(before)
        return None
    ops_before = Counter(n.op_type for n in model.graph.node)
    ops_after = Counter(n.op_type for n in after.graph.node)
    delta = {kind: ops_after[kind] - ops_before[kind] for kind in ops_before | ops_after
             if ops_after[kind] != ops_before[kind]}
    return (f"one more ONNX Runtime basic pass still rewrites it (node count by op "
            f"changes {dict(sorted(delta.items())) or 'not, but the graph does'})")


def fuse(model: onnx.ModelProto, flags: list[str]) -> onnx.ModelProto:
    """The transformer fusions the flags name (flags only the basic level applies: none)."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    if not any(FUSION_OPTION[f] for f in flags):
        return model
    options = FusionOptions("bert")
    for attr in vars(options):
        if attr.startswith("enable_") and attr != "enable_shape_inference":
            setattr(options, attr, False)
    for flag in flags:
        if FUSION_OPTION[flag]:
            setattr(options, FUSION_OPTION[flag], True)
    graph_only = has_external(model)  # its shape inference checks the graph, not weight files
    logging.disable(logging.WARNING)  # it warns that an ORT-normalized input's producer is ORT
    try:
        with contextlib.redirect_stdout(sys.stderr):  # it prints; stdout may be `--json` output
            fused = optimize_model(masked(model) if graph_only else model, model_type="bert",
                                   opt_level=0, optimization_options=options).model
    finally:
        logging.disable(logging.NOTSET)
    if graph_only:
        unmask(fused)
    return fused


def needs_weights(flags: list[str]) -> bool:
    """Whether fusing `flags` reads weight values (attention concatenates Q, K and V); the
    others match node patterns and small constants, which stay in the graph."""
    return any(f in WEIGHT_FUSIONS for f in flags)


def unfused(path: Path, flags: list[str]) -> str | None:
    """Which of `flags` one more fusion pass would still apply to the model at `path`."""
    transformer = [f for f in flags if FUSION_OPTION[f]]
    if not transformer:
        return None
    model = load(path) if needs_weights(transformer) else load_for_rewrite(path)
    before = Counter(n.op_type for n in model.graph.node)
    after = Counter(n.op_type for n in fuse(model, transformer).graph.node)
    left = [f for f in transformer if any(after[kind] > before[kind] for kind in FUSED_OPS[f])]
    return f"one more fusion pass still fuses {', '.join(left)}" if left else None
