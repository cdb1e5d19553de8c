"""A layered ONNX Runtime optimized-model cache for CPU sessions.

The first session of a model saves ORT's optimized graph as `.onnx` and checks that it loads
back. Some models do not round-trip (a known ORT bug with Loop/If subgraph initializers): the
cache then switches that model to the `.ort` format and remembers it with a hint file; if
`.ort` fails too, a sentinel file disables caching for that model. It converges in two runs.
QNN sessions are not cached here: a compiled EPContext model is already the EP's cache.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executors.runtime.adapters import host_providers

HINT_ORT = "use-ort"
DISABLED = "disabled"
MAX_CACHED_BYTES = 2**30  # above this, a cached optimized copy costs more disk than it saves time


@dataclass
class CacheInfo:
    state: str      # hit-onnx | hit-ort | wrote-onnx | wrote-ort | disabled | off
    detail: str = ""


def cache_key(model: Path) -> str:
    import onnxruntime as ort

    st = model.stat()
    raw = f"{model.resolve()}|{st.st_size}|{st.st_mtime_ns}|{ort.__version__}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _options(optimized_to: Path | None = None, from_cache: bool = False) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4  # failures here are caught and handled (demote, retry)
    if from_cache:  # already optimized: loading must not optimize again
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if optimized_to is not None:
        so.optimized_model_filepath = str(optimized_to)
        if optimized_to.suffix == ".ort":
            so.add_session_config_entry("session.save_model_format", "ORT")
        else:  # large weights beside it: a model over 2 GB cannot be one protobuf
            so.add_session_config_entry(
                "session.optimized_model_external_initializers_file_name",
                _data_name(optimized_to))
            so.add_session_config_entry(
                "session.optimized_model_external_initializers_min_size_in_bytes", "1048576")
    return so


def _data_name(optimized_to: Path) -> str:
    """The weights file beside a written graph: named for the writer, not the temporary name
    (the graph refers to it by this name after its rename)."""
    return f"optimized.{os.getpid()}.data"


def weight_bytes(model: Path) -> int:
    """The bytes of `model`'s weights: its own file and the external data it names."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    external = sum(int(e.value) for t in proto.graph.initializer
                   for e in t.external_data if e.key == "length")
    return model.stat().st_size + external


def _load_back(path: Path) -> Any:
    """Open a cached optimized model (the round trip that can fail)."""
    import onnxruntime as ort

    fmt = {"session.load_model_format": "ORT"} if path.suffix == ".ort" else {}
    so = _options(from_cache=True)
    for k, v in fmt.items():
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(str(path), so, providers=host_providers())


def cpu_session(model: Path, cache_dir: Path | None) -> tuple[Any, CacheInfo]:
    """A CPU session for `model`, through the cache when there is one."""
    import onnxruntime as ort

    if cache_dir is None:
        return ort.InferenceSession(str(model), _options(), providers=host_providers()), \
            CacheInfo("off")
    size = weight_bytes(model)
    if size > MAX_CACHED_BYTES:
        return _plain(model), CacheInfo(
            "off", f"weights of {size / 2**30:.1f} GiB: an optimized copy would double them "
                   "on disk, so this model's sessions optimize at load")
    slot = cache_dir / cache_key(model)
    slot.mkdir(parents=True, exist_ok=True)
    if (slot / DISABLED).exists():
        return _plain(model), CacheInfo("disabled", (slot / DISABLED).read_text())
    fmt = "ort" if (slot / HINT_ORT).exists() else "onnx"
    cached = slot / f"optimized.{fmt}"
    if cached.is_file():
        try:
            return _load_back(cached), CacheInfo(f"hit-{fmt}")
        except Exception as exc:  # noqa: BLE001 - a cached file that no longer loads: demote
            cached.unlink()
            _demote(slot, fmt, exc)
            return cpu_session(model, cache_dir)
    return _write(model, slot, fmt)


def _plain(model: Path) -> Any:
    """A session without the cache."""
    return host_session(model, _options(), host_providers())


def host_session(path: Path, so: Any, providers: list[str]) -> Any:
    """A host-side session; at ORT's basic level if its full level fails on the model."""
    import onnxruntime as ort

    try:
        return ort.InferenceSession(str(path), so, providers=providers)
    except Exception:  # noqa: BLE001 - retried once, at the level the model was normalized at
        # ORT 1.32 fails its full optimization level on some models its basic level wrote
        # ("Attempt to replace the existing tensor", dynamo exports); they are already basic.
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        return ort.InferenceSession(str(path), so, providers=providers)


def _write(model: Path, slot: Path, fmt: str) -> tuple[Any, CacheInfo]:
    """Save ORT's optimized model as `fmt` and check it loads back; a failure at either end
    demotes the model (onnx -> ort -> no cache) and the session is still returned."""
    import onnxruntime as ort

    target = slot / f"optimized.{fmt}"
    tmp = slot / f".writing.{os.getpid()}.{fmt}"  # steps of a sweep may write one slot at once
    try:
        session = ort.InferenceSession(str(model), _options(tmp), providers=host_providers())
        _load_back(tmp)
    except Exception as exc:  # noqa: BLE001 - ORT raises several types on a bad save/load
        tmp.unlink(missing_ok=True)
        (slot / _data_name(tmp)).unlink(missing_ok=True)
        _demote(slot, fmt, exc)
        if fmt == "onnx":
            return _write(model, slot, "ort")
        return _plain(model), CacheInfo("disabled", str(exc).strip().splitlines()[0])
    tmp.replace(target)
    return session, CacheInfo(f"wrote-{fmt}")


def _demote(slot: Path, fmt: str, exc: Exception) -> None:
    why = f"{fmt} round trip failed: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
    (slot / (HINT_ORT if fmt == "onnx" else DISABLED)).write_text(why)
