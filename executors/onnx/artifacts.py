"""ONNX artifacts: the facts stamp, metadata helpers, and the checks run after every step."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executors.store import weights
from planner.models.seq2seq import LOOP_FILE

if TYPE_CHECKING:  # imported where used: a fully cached run never loads onnx (nor numpy)
    import onnx

MODEL = "model.onnx"                   # a step's model output
SOURCE = "source.json"                 # what resolve found
METRICS = "metrics.json"               # a sink's measurements
SIDECAR = "model_htp_metadata.json"    # the export's hierarchy map
REPORT = "model_hierarchy.md"          # the export's optional hierarchy report
ROLE_FILES = {"hierarchy": (SIDECAR, REPORT),
              "loop": (LOOP_FILE, f"{LOOP_FILE}.data")}  # an output role's files, besides the model
FACTS_KEY = "modelplan.facts"
OPSET_RAISED_KEY = "modelplan.opset_raised"  # export's record of an opset raised for an operator
TAG_KEY = "winml.hierarchy.tag"
DEPTH_KEY = "winml.hierarchy.depth"


def load(path: Path, external: bool = True) -> onnx.ModelProto:
    """The model at `path`; external=False: the graph only, its large weights left as
    references to their files (executors/store/weights.py), which `save` links rather than copies."""
    import onnx

    weights.remember(Path(path).parent)
    model = onnx.load(str(path), load_external_data=False)
    if external:  # read here: onnx's loader refuses blobs that several entries hard-link
        weights.internalize(model, Path(path).parent)
    return model


def load_for_rewrite(path: Path) -> onnx.ModelProto:
    """The model at `path` with every tensor but the weights (of MatMul, Gemm and Conv nodes,
    Gather tables) read in: what graph rewrites and shape inference look at, without most of
    the bytes."""
    model = load(path, external=False)
    weights.internalize(model, Path(path).parent, skip=weights.matmul_weights(model))
    return model


def save(model: onnx.ModelProto, path: Path, base: Path | None = None) -> None:
    """Save with model metadata in key order (ORT keeps it in a map, so its order after an
    ORT pass is arbitrary, and the same model must always be the same bytes) and every large
    weight as a content-addressed blob beside it (weights.externalize; external data the model
    still refers to is found relative to `base`, default `path`'s directory). A tool's own
    external-data files beside it are removed once their tensors are blobs."""
    import onnx

    props = sorted((p.key, p.value) for p in model.metadata_props)
    del model.metadata_props[:]
    for key, value in props:
        model.metadata_props.add(key=key, value=value)
    read = weights.externalize(model, Path(path), base)
    onnx.save_model(model, str(path))
    for stale in read - {Path(path)}:  # a tool's external data beside it, now blobs
        stale.unlink(missing_ok=True)


def set_meta(holder: onnx.ModelProto | onnx.NodeProto, key: str, value: str) -> None:
    """Set one metadata_props entry of a model or a node, never adding a duplicate key."""
    for entry in holder.metadata_props:
        if entry.key == key:
            entry.value = value
            return
    holder.metadata_props.add(key=key, value=value)


def model_meta(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def stamp_file(out: Path, facts: dict[str, Any], step: str, key: str) -> None:
    """Stamp observed facts into a step's output: its model's metadata (the graph only is
    rewritten; external weights stay as they are) and its source description, if any."""
    model_path, source_path = out / MODEL, out / SOURCE
    if model_path.is_file():
        model = load(model_path, external=False)
        set_meta(model, FACTS_KEY, json.dumps(
            {"facts": facts, "step": step, "key": key}, sort_keys=True))
        save(model, model_path)
    if source_path.is_file():
        info = json.loads(source_path.read_text())
        info["facts"] = facts
        source_path.write_text(json.dumps(info, indent=2, sort_keys=True))


def read_facts(path: Path) -> dict[str, Any] | None:
    """The facts stamped into an artifact by the step that wrote it (None when unstamped)."""
    if not path.is_file():
        return None
    raw = model_meta(load(path, external=False)).get(FACTS_KEY)
    return json.loads(raw)["facts"] if raw else None


def clear_node_meta(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        del node.metadata_props[:]


def problems(path: Path, tagged: bool) -> list[str]:
    """Everything wrong with an artifact: its weight files, onnx.checker (full), duplicate
    metadata keys at model and node level, and untagged nodes once the model is tagged."""
    import onnx

    from executors.onnx import rms_norms

    model = load(path, external=False)
    rms_norms.register()  # ONNX Runtime's op, in a graph HTP's legalize fused
    found = weights.blob_problems(model, path.parent)
    try:  # the graph, its weights' files checked above (onnx refuses hard-linked blobs)
        onnx.checker.check_model(weights.masked(model), full_check=True)
    except Exception as exc:  # noqa: BLE001 - the checker raises several types
        found.append(f"onnx.checker: {str(exc).strip().splitlines()[0]}")
    dup = [k for k, n in Counter(p.key for p in model.metadata_props).items() if n > 1]
    if dup:
        found.append(f"model metadata key(s) {dup} appear more than once")
    for node in model.graph.node:
        keys = Counter(p.key for p in node.metadata_props)
        if any(n > 1 for n in keys.values()):
            found.append(f"node {node.name!r} has duplicate metadata keys")
        if tagged and TAG_KEY not in keys:
            found.append(f"node {node.name!r} ({node.op_type}) has no hierarchy tag")
    return found
