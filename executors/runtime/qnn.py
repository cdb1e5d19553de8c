"""ONNX Runtime sessions on the CPU EP or the QNN EP (a plugin EP library), and capture of
the native log so a QNN failure can be reported with its own words."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_REGISTERED: list[Any] = []
QNN = "QNNExecutionProvider"


def available_eps() -> set[str]:
    """The execution providers steps can name (`ep` params) that are installed here."""
    import importlib.util

    return {"cpu"} | ({"qnn"} if importlib.util.find_spec("onnxruntime_qnn") else set())


def qnn_devices() -> list[Any]:
    """Register the QNN EP library once and return its devices."""
    import onnxruntime as ort

    if not _REGISTERED:
        import onnxruntime_qnn

        with native_log():  # the library announces itself on load
            ort.register_execution_provider_library(QNN, onnxruntime_qnn.get_library_path())
        _REGISTERED.append(True)
    return [d for d in ort.get_ep_devices() if d.ep_name == QNN]


def session_options(ep: str, backend: str | None, provider_options: dict[str, Any],
                    cpu_fallback: bool = True, configs: dict[str, str] | None = None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3 if ep == "qnn" else 4  # CPU failures are caught and retried
    if ep == "qnn":
        opts = {"backend_type": backend or "htp",
                **{k: str(v) for k, v in provider_options.items()}}
        so.add_provider_for_devices(qnn_devices(), opts)
        if not cpu_fallback:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    for k, v in (configs or {}).items():
        so.add_session_config_entry(k, v)
    return so


def session(path: Path, ep: str, backend: str | None = None,
            provider_options: dict[str, Any] | None = None, cpu_fallback: bool = True,
            so: Any = None) -> Any:
    import onnxruntime as ort

    so = so or session_options(ep, backend, provider_options or {}, cpu_fallback)
    if ep == "qnn":
        return ort.InferenceSession(str(path), so)
    try:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - retried once, at the level the model was normalized at
        # ORT 1.32 fails its full optimization level on some models its basic level wrote
        # ("Attempt to replace the existing tensor", dynamo exports); they are already basic.
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


@contextmanager
def native_log() -> Iterator[list[str]]:
    """Capture what native code writes to fd 1 and fd 2 inside the block (the QNN backend
    prints to both); the lines are in the yielded list afterwards."""
    lines: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            lines.extend(tmp.read().decode(errors="replace").splitlines())


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def qnn_errors(lines: list[str]) -> tuple[list[str], list[str]]:
    """(error lines, offending nodes) from a captured ORT/QNN log."""
    clean = [ANSI.sub("", ln) for ln in lines]
    errors = [ln.split("] ", 1)[-1] for ln in clean if "[E:" in ln]
    nodes = re.findall(r"name: ([^,]+), type: ([^ }]+)", "\n".join(clean))
    return errors, [f"{name} ({kind})" for name, kind in nodes]
