"""EPContext models that share one QNN context binary, so graphs with the same weights (an LLM's
prefill and decode graphs) hold them once.

How the QNN EP shares (onnxruntime 1.32, onnxruntime-qnn 2.7.0, measured):
* every compile of the group runs in one process with `ep.share_ep_contexts=1`; the last one also
  sets `ep.stop_share_ep_contexts=1`, which writes the binary, named after the first model
  (`<first>_ctx_qnn.bin`). The shared workspace is a process singleton, so the group cannot be
  split across processes. Embed mode must be 0: every model names the one external binary.
* on x86-64 the EP compiles such a group with the HTP weight-sharing context option, and the
  x86 HTP backend (the simulator) dereferences a null function pointer in
  `contextCreateFromBinary` when it loads any multi-graph binary made that way (SIGSEGV; with
  or without `ep.share_ep_contexts` at load, in either order, and even when the graphs' weights
  differ). A multi-graph binary from one model without sharing loads. ONNX Runtime's own
  weight-sharing test only loads on aarch64, so such a binary is for the device.

So `build_context_set` compiles the shared group, tries to load it in a child process, and when
that fails it keeps the shared set for the device and compiles each graph on its own (one binary
each) for this host, saying why. Every compile and load attempt runs in a child process, so a
crash of the backend is an error here, not the end of the build.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.core.targets import Target, named
from planner.errors import StepError

SHARE = {"ep.share_ep_contexts": "1"}
STOP = {"ep.stop_share_ep_contexts": "1"}
CHILD = "executors.runtime.shared_context"  # run as `python -m`, where __name__ is __main__


class ContextError(StepError):
    """A compile or load of EPContext models failed or crashed."""


@dataclass(frozen=True)
class ContextSet:
    """EPContext models in the order of their sources and the binaries they name. `shared`:
    one binary for all; else `reason` says why not and `device_set` holds the shared set that
    this host could not load (kept for a device that can)."""

    models: list[Path]
    binaries: list[Path]
    shared: bool
    reason: str = ""
    device_set: list[Path] | None = None


def context_model_path(out_dir: Path, source: Path) -> Path:
    return out_dir / f"{source.stem}_ctx.onnx"


def binaries_of(models: list[Path]) -> list[Path]:
    """The distinct context binaries the EPContext nodes of `models` name (embed mode 0)."""
    import onnx

    found: list[Path] = []
    for path in models:
        for node in onnx.load(str(path), load_external_data=False).graph.node:
            if node.op_type != "EPContext":
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            if attrs.get("embed_mode", 1) == 0 and attrs.get("main_context", 1) == 1:
                name = path.parent / attrs["ep_cache_context"].decode()
                if name not in found:
                    found.append(name)
    return found


def compile_group(target: Target, sources: list[Path], out_dir: Path,
                  provider_options: dict[str, Any] | None = None, share: bool = True) -> list[Path]:
    """Compile `sources` into EPContext models in `out_dir`: one child process for a shared
    group (the EP's shared workspace lives in one process), one per source otherwise."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [list(sources)] if share else [[s] for s in sources]
    for group in jobs:
        _child(target, "compile", group, out_dir, provider_options, share)
    models = [context_model_path(out_dir, s) for s in sources]
    missing = [m.name for m in models if not m.is_file()]
    if missing:
        raise ContextError(f"the QNN EP wrote no EPContext model for {', '.join(missing)}",
                           "check the provider options and that every node runs on the HTP")
    return models


def load_problem(target: Target, models: list[Path],
                 provider_options: dict[str, Any] | None = None, shared: bool = True) -> str:
    """Why `models` cannot be opened and run together here ('' when they can), found by
    trying in a child process."""
    try:
        _child(target, "load", models, None, provider_options, shared)
    except ContextError as exc:
        return exc.lines[0]
    return ""


def build_context_set(target: Target, sources: list[Path], out_dir: Path,
                      provider_options: dict[str, Any] | None = None) -> ContextSet:
    """Compile `sources` sharing one binary if this host can load it; else separately, keeping
    the shared set in `out_dir/shared` for the device and saying why."""
    shared = compile_group(target, sources, out_dir / "shared", provider_options, share=True)
    problem = load_problem(target, shared, provider_options, shared=True)
    if not problem:
        return ContextSet(shared, binaries_of(shared), shared=True)
    separate = compile_group(target, sources, out_dir / "separate", provider_options,
                             share=False)
    still = load_problem(target, separate, provider_options, shared=False)
    if still:
        raise ContextError(f"the separately compiled EPContext models do not load: {still}",
                           f"compile each graph alone to see why ({out_dir})")
    return ContextSet(separate, binaries_of(separate), shared=False,
                      reason=f"the shared context binary does not load on this host: {problem}",
                      device_set=shared)


def open_sessions(target: Target, cs: ContextSet,
                  provider_options: dict[str, Any] | None = None) -> list[Any]:
    """Sessions on the models of `cs`, created in order (the first loads the shared binary and
    leaves the other graphs in the EP's workspace for the next). Drop them in reverse order.
    Only for a set `build_context_set` returned: a shared set it returns has loaded before."""
    configs = SHARE if cs.shared else {}
    return [_session(target, m, provider_options, configs) for m in cs.models]


def _session(target: Target, path: Path, provider_options: dict[str, Any] | None,
             configs: dict[str, str]) -> Any:
    import onnxruntime as ort

    from executors.runtime import qnn

    so = qnn.session_options(target, {**target.provider_options, **(provider_options or {})},
                             cpu_fallback=False, configs=configs)
    return ort.InferenceSession(str(path), so)


def _child(target: Target, action: str, paths: list[Path], out_dir: Path | None,
           provider_options: dict[str, Any] | None, share: bool) -> None:
    """Run `action` in a child process; a non-zero exit or a signal is a ContextError."""
    spec = {"target": target.name, "action": action, "paths": [str(p) for p in paths], "share": share,
            "out_dir": str(out_dir) if out_dir else None, "options": provider_options or {}}
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    done = subprocess.run([sys.executable, "-m", CHILD, json.dumps(spec)], env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode == 0:
        return
    names = ", ".join(p.name for p in paths)
    how = (f"crashed with {signal.Signals(-done.returncode).name}" if done.returncode < 0
           else f"failed (exit {done.returncode})")
    said = [ln for ln in (done.stderr or "").splitlines() if ln.strip()][-1:]
    raise ContextError(f"{action} of {names} {how}" + "".join(f": {s}" for s in said),
                       f"the backend's log is the child's stderr ({out_dir or paths[0].parent})")


def _compile_in_child(spec: dict[str, Any]) -> None:
    target = named(spec["target"])
    out_dir = Path(spec["out_dir"])
    sources = [Path(p) for p in spec["paths"]]
    for i, source in enumerate(sources):
        configs = {"ep.context_enable": "1", "ep.context_embed_mode": "0",
                   "ep.context_file_path": str(context_model_path(out_dir, source))}
        if spec["share"]:
            configs |= SHARE | (STOP if i == len(sources) - 1 else {})
        _session(target, source, spec["options"], configs)


def _load_in_child(spec: dict[str, Any]) -> None:
    import numpy as np

    target = named(spec["target"])
    configs = SHARE if spec["share"] else {}
    sessions = [_session(target, Path(p), spec["options"], configs) for p in spec["paths"]]
    for sess in sessions:
        feed = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],
                                 _numpy_type(i.type)) for i in sess.get_inputs()}
        sess.run(None, feed)
    while sessions:
        sessions.pop()


def _numpy_type(onnx_type: str) -> Any:
    import numpy as np

    return {"tensor(float)": np.float32, "tensor(int64)": np.int64,
            "tensor(float16)": np.float16, "tensor(int32)": np.int32}[onnx_type]


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    try:
        (_compile_in_child if request["action"] == "compile" else _load_in_child)(request)
    except Exception as exc:  # noqa: BLE001 -- one line for the parent; the backend's log is above it
        sys.stderr.write(str(exc).strip().splitlines()[0] + "\n")
        sys.exit(1)
