"""The runtime manifest of a deliverable (`runtime.json`, also the run record's `runtime`):
what its graphs need to load. ONNX Runtime's version and the target's EP packages (read as the
content keys read them), the SDK the EP's backend reported when it compiled the graphs (the
EPContext nodes' `ep_sdk_version`) and, per graph, what the compiled context is for (the EP's
compatibility info: HTP architecture, SoC), the provider options, and the command that rebuilds
it. `modelplan check` and `modelplan generate` compare it with the runtime present before any
graph is loaded: a compiled model does not load on another SDK (QNN errors 5000/5005)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from executors.runtime.adapters import adapter
from planner.core.keys import tool_version
from planner.core.targets import Target, named, reference
from planner.errors import UsageError
from planner.render.card import rebuild_command

RUNTIME = "runtime.json"
FORMAT_VERSION = 1
BUNDLE = "bundle.json"
COMPAT_PREFIX = "ep_compatibility_info."


def packages(target: Target) -> list[str]:
    return ["onnxruntime", *target.session.packages]


def describe_graph(path: Path, target: Target) -> dict[str, Any]:
    """What a graph is (epcontext, qdq or float) and, compiled, what its context is for."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    ops = {n.op_type for n in model.graph.node}
    kind = "epcontext" if "EPContext" in ops else \
        "qdq" if ops & {"QuantizeLinear", "DequantizeLinear"} else "float"
    out: dict[str, Any] = {"kind": kind}
    if kind == "epcontext":
        sdk = {onnx.helper.get_attribute_value(a).decode() for n in model.graph.node
               if n.op_type == "EPContext" for a in n.attribute if a.name == "ep_sdk_version"}
        compat = {p.key[len(COMPAT_PREFIX):]: p.value for p in model.metadata_props
                  if p.key.startswith(COMPAT_PREFIX)}
        out |= {"sdk_build": min(sdk) if sdk else None,
                "compatibility": compat.get(target.provider)}
        out |= adapter(target).context_info(out["compatibility"] or "")
    return out


def _graph_files(stage: Path) -> dict[str, str]:
    """The folder's graphs and where each runs: `target`, `host` (a bundle's host layers, on
    the CPU) or `device` (a shared-context set for the device that may not load here)."""
    bundle = _json(stage / BUNDLE) if (stage / BUNDLE).is_file() else None
    if bundle is None:
        return {"model.onnx": "target"} if (stage / "model.onnx").is_file() else {}
    found: dict[str, str] = {}
    for entry in bundle.get("graphs", {}).values():
        name = entry["model"]
        if name.endswith("_parts.json"):  # a split graph: its parts
            found |= {p["model"]: "target" for p in _json(stage / name)["pieces"]}
        else:
            found[name] = "target"
    found |= {name: "host" for name in (bundle.get("host") or {}).values()}
    genai = bundle.get("genai") or {}  # onnxruntime-genai's graph over the target's
    for name in [genai["model"]] if "model" in genai else genai.get("stages", {}).values():
        found[name] = "target"  # (executors/generation/windowed.py, stages.py)
    shared = bundle.get("shared_context") or {}
    found |= {f"{shared['folder']}/{m}": "device" for m in shared.get("models", [])}
    return found


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def manifest(record: dict[str, Any], stage: Path) -> dict[str, Any]:
    """The manifest of the deliverable published into `stage`, from the run record."""
    target = named(record["model"]["target"])
    graphs = {name: {"runs_on": where, **describe_graph(stage / name,
                                                         target if where != "host" else
                                                         reference())}
              for name, where in _graph_files(stage).items()}
    builds = sorted({g["sdk_build"] for g in graphs.values() if g.get("sdk_build")})
    sdk = sdk_of_build(builds[0]) if builds else None
    return {"format_version": FORMAT_VERSION, "target": target.name, "ep": target.ep,
            "provider": target.provider, "backend": target.backend,
            "provider_options": record["model"].get("provider_options", {}),
            "packages": {p: tool_version(p) for p in packages(target)},
            **({"sdk": {"name": adapter(target).SDK, "version": sdk, "build": builds[0]}}
               if sdk else {}),
            "graphs": graphs, "rebuild": rebuild_command(record)}


def sdk_of_build(build: str) -> str:
    """`v2.51.0.260929181845` (a backend's build id) -> `2.51.0`."""
    return ".".join(build.lstrip("v").split(".")[:3])


def write(record: dict[str, Any], stage: Path, out_dir: Path) -> None:
    """runtime.json in `stage`, and the record's `runtime`."""
    found = manifest(record, stage)
    (stage / RUNTIME).write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
    record["runtime"] = found
    record["published"][RUNTIME] = str(out_dir / RUNTIME)


# --- comparing with the runtime present ------------------------------------------------------

def read(folder: Path) -> dict[str, Any]:
    """A deliverable's runtime manifest, checked; UsageError (one line) when it is not one."""
    if not folder.exists():
        raise UsageError(f"check {folder}: no such folder; give a deliverable's folder "
                         "(modelplan run prints it as Deliverable)")
    if not folder.is_dir():
        raise UsageError(f"check {folder}: not a folder; give the deliverable's folder, not a "
                         "file in it")
    path = folder / RUNTIME
    if not path.is_file():
        raise UsageError(f"check {folder}: not a deliverable of this version (no {RUNTIME}); "
                         "give a folder modelplan run published, or rebuild it")
    try:
        found = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"check {path}: not JSON ({str(exc).splitlines()[0]}); rebuild the "
                         "deliverable with modelplan run") from exc
    problem = _malformed(found, folder)
    if problem:
        raise UsageError(f"check {path}: {problem}; rebuild the deliverable with modelplan run")
    return found


def _malformed(found: Any, folder: Path) -> str:
    if not isinstance(found, dict) or found.get("format_version") != FORMAT_VERSION:
        return f"not a runtime manifest of format {FORMAT_VERSION}"
    try:
        named(str(found.get("target")))
    except Exception:  # noqa: BLE001 - a target this version does not declare
        return f"names target {found.get('target')!r}, which this version does not declare"
    packages_ = found.get("packages")
    if not isinstance(packages_, dict) or not all(isinstance(v, str) for v in packages_.values()):
        return "`packages` is not a map of package names to versions"
    sdk = found.get("sdk")
    if sdk is not None and not (isinstance(sdk, dict) and isinstance(sdk.get("version"), str)):
        return "`sdk` has no version"
    graphs = found.get("graphs")
    if not isinstance(graphs, dict) or not graphs or not all(
            isinstance(g, dict) and g.get("runs_on") in ("target", "host", "device")
            for g in graphs.values()):
        return "`graphs` does not list the folder's graphs and where each runs"
    missing = [n for n in graphs if not (folder / n).is_file()]
    if missing:
        return f"names graphs the folder does not hold ({', '.join(missing[:3])})"
    if not isinstance(found.get("provider_options", {}), dict):
        return "`provider_options` is not a map"
    return ""


def differences(found: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, the deliverable's version, this environment's) for each that differs."""
    target = named(found["target"])
    out = [(name, built, tool_version(name)) for name, built in sorted(found["packages"].items())
           if tool_version(name) != built]
    sdk = found.get("sdk")
    if sdk:
        here = adapter(target).sdk_version()
        if here != sdk["version"]:
            out.append((sdk.get("name") or "SDK", sdk["version"], here or "none"))
    return out


def mismatch(folder: Path, found: dict[str, Any]) -> str:
    """One line saying what differs and the command that rebuilds for this runtime, or ''."""
    diff = differences(found)
    if not diff:
        return ""
    built = ", ".join(f"{what} {was}" for what, was, _ in diff)
    here = ", ".join(f"{what} {now}" for what, _, now in diff)
    again = found.get("rebuild") or "modelplan run ..."
    return (f"{folder} was built for {built}; this environment has {here}: rebuild it for "
            f"this runtime with `{again} --outputs {shlex.quote(str(folder.parent))} "
            f"--name {shlex.quote(folder.name)}`")
