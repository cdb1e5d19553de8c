"""ONNX Runtime graph optimization: the basic level run to a fixed point (one pass is not
always enough: on ORT 1.32 a second basic pass still rewrites a freshly exported BERT), the
transformer fusions optim.flags name, and the observations the fact checkers make with them.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections import Counter
from pathlib import Path

import onnx

from executors.artifacts import load, save
from planner.errors import StepError
from planner.ops import FUSIONS

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
assert set(FUSION_OPTION) == set(FUSED_OPS) == set(FUSIONS)
_FIXED_POINTS: set[str] = set()  # structure digests this process saw the basic level keep
# files this process saved a fixed point to, by (path, size, mtime, inode): a fixed point
# observed once is not observed again while the file is unchanged
_FIXED_FILES: set[tuple[str, int, int, int]] = set()


def structure_digest(model: onnx.ModelProto) -> str:
    """Digest of what optimization acts on: nodes (without their metadata), initializers,
    inputs and outputs; value_info and doc strings left out."""
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    del graph.value_info[:]
    for node in graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    return hashlib.sha256(graph.SerializeToString(deterministic=True)).hexdigest()


def ort_pass(src: Path, dst: Path) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])


def basic_fixed_point(model: onnx.ModelProto, work: Path,
                      src: Path | None = None) -> tuple[onnx.ModelProto, int]:
    """Apply ORT basic optimizations until a pass leaves the graph equal to its input.
    Returns the model (with shapes inferred) and the number of passes that changed it.
    `src`: a file that already holds `model` (the first pass reads it; nothing is saved)."""
    current = src if src is not None else work / "pass_0.onnx"
    if src is None:
        save(model, current)
    previous, passes = model, 0
    for i in range(1, MAX_PASSES + 1):
        nxt = work / f"pass_{i}.onnx"
        ort_pass(current, nxt)
        new = load(nxt)
        if current != src:
            current.unlink()
        current = nxt
        if new.graph == previous.graph:  # proto equality: as exact as a digest, and no copy
            break
        previous, passes = new, i
    else:
        raise StepError(f"ONNX Runtime's basic optimizations did not reach a fixed point in "
                        f"{MAX_PASSES} passes; set optim=none and report this model")
    del previous
    result = onnx.shape_inference.infer_shapes(new, data_prop=True)
    current.unlink()
    for meta in model.metadata_props:  # keep the model-level metadata ORT may not carry over
        if meta.key not in {p.key for p in result.metadata_props}:
            result.metadata_props.add(key=meta.key, value=meta.value)
    return result, passes


def _file_identity(path: Path) -> tuple[str, int, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino


def save_fixed_point(model: onnx.ModelProto, path: Path) -> None:
    """Save what basic_fixed_point returned, remembering that the file holds a fixed point (its
    last pass changed nothing), so observing `normalized` on it here costs no pass."""
    save(model, path)
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
    return optimize_model(model, model_type="bert", opt_level=0,
                          optimization_options=options).model


def unfused(path: Path, flags: list[str]) -> str | None:
    """Which of `flags` one more fusion pass would still apply to the model at `path`."""
    transformer = [f for f in flags if FUSION_OPTION[f]]
    if not transformer:
        return None
    model = load(path)
    before = Counter(n.op_type for n in model.graph.node)
    after = Counter(n.op_type for n in fuse(model, transformer).graph.node)
    left = [f for f in transformer if any(after[kind] > before[kind] for kind in FUSED_OPS[f])]
    return f"one more fusion pass still fuses {', '.join(left)}" if left else None
