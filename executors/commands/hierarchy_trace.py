"""The module hierarchy of a model from a random-weight trace: what `modelplan inspect
--hierarchy` prints. The model is built from its config (no weights are read), each graph is
traced and exported to a temporary file exactly as the export step does, and the nodes are
counted per hierarchy tag."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from executors.generation.modules import graph_module
from executors.onnx import hierarchy
from executors.onnx.free_axes import free_axes
from executors.runtime import dense_experts, torchmodel
from executors.runtime.torch_onnx import ExportFailed, export_graph, start_opset
from executors.samples import Samples
from planner.models.roles import role_of


def _random_model(described: dict[str, Any], model: dict[str, Any]) -> Any:
    import torch
    import transformers

    if model["source"] == "random_init":
        from planner.models.sources import random_init

        ri = random_init(model)
        config = transformers.AutoConfig.for_model(ri["model_type"], **ri["config"])
    else:
        config = transformers.AutoConfig.from_pretrained(
            described["path"], local_files_only=True,
            trust_remote_code=model["trust_remote_code"])
    cls = torchmodel.model_class({"model_class": described["model_class"],
                                  "task": described["task"]})
    torch.manual_seed(0)
    # the attention and the experts the export loads with
    chosen = {"attn_implementation": "eager"}
    if torchmodel.chooses_experts(cls):
        chosen["experts_implementation"] = torchmodel.TRACEABLE_EXPERTS
    try:
        built = cls.from_config(config, **chosen) if cls.__name__.startswith("Auto") else \
            cls._from_config(config, **chosen)
    except (TypeError, ValueError):
        built = cls.from_config(config) if cls.__name__.startswith("Auto") else cls(config)
    torchmodel.traceable_experts(built)
    # a checkpoint saved in bf16 or fp16 makes its random model in that dtype; the module tree
    # is the same in fp32, which takes the fp32 example inputs
    return built.float().eval()


def _traced(model: Any, graph: str, spec: dict[str, Any],
            torch_modules: list[str]) -> tuple[Any, tuple, dict[str, Any], Any]:
    """One graph's module, its traced inputs, and the modules a forward pass runs (as the
    export step traces them)."""
    import torch

    names = [s["name"] for s in spec["inputs"]]
    role = role_of(graph, names)
    dense_experts.densify(model, fixed=not spec.get("dynamic"))  # as its export traces it
    module = graph_module(model, role, names, spec["outputs"])
    feed = Samples(spec["inputs"], "verify").feeds(1)[0]
    args = tuple(torch.from_numpy(feed[n]) for n in names)
    with torch.no_grad():
        scopes, folded = hierarchy.executed_modules(
            model, lambda m=module, a=args: m(*a), frozenset(torch_modules))
        scopes = hierarchy.rebase(scopes, torchmodel.traced_base(model, role))
    return module, args, scopes, folded


def module_trees(described: dict[str, Any], config: dict[str, Any]) -> dict[str, dict]:
    """{graph: the module tree of its export's sidecar (traced modules, inlined classes,
    root)} from a forward pass of a random-weight model: no export, no weights read."""
    model = _random_model(described, config["model"])
    out = {}
    for graph, spec in described["graphs"].items():
        _module, _args, scopes, folded = _traced(model, graph, spec,
                                                 config["export"]["torch_modules"])
        out[graph] = {"traced_modules": sorted(set(scopes.values())),
                      "inlined_classes": list(folded),
                      "root": scopes.get("", f"/{type(model).__name__}")}
    return out


def hierarchy_counts(described: dict[str, Any], config: dict[str, Any]) -> dict[str, dict]:
    """{graph: {hierarchy tag: nodes}} for every graph the build exports."""
    model = _random_model(described, config["model"])
    ex = config["export"]
    out: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for graph, spec in described["graphs"].items():
            names = [s["name"] for s in spec["inputs"]]
            module, args, scopes, folded = _traced(model, graph, spec, ex["torch_modules"])
            path = Path(tmp) / f"{graph}.onnx"
            axes = None
            if spec.get("dynamic"):  # the axes the build leaves free, as its export does
                import torch

                with torch.no_grad():
                    axes = free_axes(args, names, module(*args), spec["outputs"])
            try:
                export_graph(module, args, names, spec["outputs"], path, ex["exporter"],
                             ex["opset"], axes)
            except ExportFailed:  # the export step's fallback, as the build takes it
                if ex.get("fallback") in (None, ex["exporter"]):
                    raise
                export_graph(module, args, names, spec["outputs"], path, ex["fallback"],
                             start_opset(ex["fallback"], ex["exporter"], ex["opset"]), axes)
            import onnx

            nodes = [n.name for n in onnx.load(str(path), load_external_data=False).graph.node]
            root = scopes.get("", f"/{type(model).__name__}")
            meta = hierarchy.sidecar(nodes, scopes, torchmodel.WRAPPER_PREFIX, root, folded)
            out[graph] = dict(sorted(Counter(v["tag"] for v in meta["nodes"].values()).items()))
    return out
