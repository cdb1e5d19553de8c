"""The axes a graph is exported with (docs/deliverables.md#input-shapes): a text model of one
graph keeps its batch and sequence axes free in its export (export.shapes.dynamic, null by
default), and a target that compiles fixes them in a fix_shapes step after it, so one export
serves every target of a sweep."""

from __future__ import annotations

from typing import Any

from planner.core.targets import of_config
from planner.models import tasks as T


def free_or_fixed(config: dict[str, Any], modality: str, graphs: dict[str, Any]) -> dict[str, Any]:
    """The graphs, each saying whether its export leaves a text model's batch and sequence axes
    free (export.shapes.dynamic; null: yes) and whether a compiling target fixes them after."""
    dynamic = _dynamic(config, modality, graphs)
    for spec in graphs.values():
        spec.update(dynamic=dynamic, fixed=dynamic and of_config(config["target"]).compiles)
    return graphs


def _dynamic(config: dict[str, Any], modality: str, graphs: dict[str, Any]) -> bool:
    from planner.errors import ConfigError

    wanted = config["export"]["shapes"]["dynamic"]
    target = of_config(config["target"])
    free_here = modality in (T.TEXT, T.CAUSAL_UNCACHED) and len(graphs) == 1
    dynamo = config["export"]["exporter"] == "dynamo"
    if wanted is None:  # one export with free axes for every target (fix_shapes fixes them)
        return free_here and not dynamo
    if wanted and dynamo:
        raise ConfigError("export.shapes.dynamic=true: free axes are exported with the "
                          "TorchScript exporter (by dynamo only where TorchScript fails: "
                          "export.fallback); use export=torchscript")
    if wanted and target.compiles:
        raise ConfigError(f"export.shapes.dynamic=true: target {target.name} compiles graphs "
                          "of fixed shapes; set export.shapes.dynamic=null or false")
    if wanted and not free_here:
        raise ConfigError(f"export.shapes.dynamic=true: free axes are built for text models of "
                          f"one graph, and this is a {modality} model"
                          f"{' of several graphs' if len(graphs) > 1 else ''}; set "
                          "export.shapes.dynamic=null or false")
    return bool(wanted)
