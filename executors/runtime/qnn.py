"""Sessions on the QNN EP (a plugin EP library), the adapter of the QNN targets, and the
reading of QNN's own log so a failure can be reported in its words."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from executors.runtime.adapters import base_options
from executors.runtime.nativelog import native_log
from planner.core.targets import Target

_REGISTERED: list[Any] = []


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime_qnn") is not None


SDK = "QNN SDK"
_SDK_VERSION = re.compile(r"^qnn_version\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)


def sdk_version() -> str | None:
    """The QNN SDK (QAIRT) version the installed onnxruntime-qnn wheel ships its backend
    libraries from: `qnn_version` in the wheel's build_and_package_info.py, read as text (the
    package is not imported, so no backend is loaded). None without onnxruntime-qnn."""
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime_qnn")
    if spec is None or not spec.submodule_search_locations:
        return None
    info = Path(next(iter(spec.submodule_search_locations))) / "build_and_package_info.py"
    try:
        found = _SDK_VERSION.search(info.read_text())
    except OSError:
        return None
    return found.group(1) if found else None


def context_info(compatibility: str) -> dict[str, Any]:
    """What a compiled context is for, from the EP's compatibility info (measured with
    onnxruntime-qnn 2.7.0: `v2:<backend id>:<SDK>:<HTP API>:<htp_arch>:<soc_model>:...`, 0
    where the compile named none: the backend then picks its default architecture)."""
    fields = compatibility.split(":")
    if len(fields) < 6 or fields[0] != "v2":
        return {"htp_arch": None, "soc_model": None}
    arch, soc = (int(f) if f.isdigit() and int(f) else None for f in fields[4:6])
    return {"sdk_compiled": fields[2], "htp_arch": arch, "soc_model": soc}


def qnn_devices(target: Target) -> list[Any]:
    """Register the QNN EP library once and return its devices."""
    import onnxruntime as ort

    if not _REGISTERED:
        import onnxruntime_qnn

        _load_before_the_backend()

        with native_log():  # the library announces itself on load
            ort.register_execution_provider_library(target.provider,
                                                    onnxruntime_qnn.get_library_path())
        _REGISTERED.append(True)
    return [d for d in ort.get_ep_devices() if d.ep_name == target.provider]


def _load_before_the_backend() -> None:
    """Load libsndfile before the HTP backend: once the backend is loaded, python-soundfile's
    import fails (libsndfile's version call returns NULL, measured with onnxruntime-qnn 2.7.0),
    and transformers imports it with every image or audio processor."""
    import importlib.util

    if importlib.util.find_spec("soundfile") is not None:
        import soundfile  # noqa: F401


def session_options(target: Target, provider_options: dict[str, Any],
                    cpu_fallback: bool = True, configs: dict[str, str] | None = None) -> Any:
    so = base_options(target, {**({} if cpu_fallback else target.session.no_fallback),
                                **(configs or {})})
    opts = {target.session.backend_option: target.backend,
            **{k: str(v) for k, v in provider_options.items()}}
    so.add_provider_for_devices(qnn_devices(target), opts)
    return so


def session(path: Path, target: Target, provider_options: dict[str, Any] | None = None,
            cpu_fallback: bool = True, so: Any = None) -> Any:
    import onnxruntime as ort

    so = so or session_options(target, provider_options or {}, cpu_fallback)
    return ort.InferenceSession(str(path), so)


def step_session(path: Path, target: Target, provider_options: dict[str, Any],
                 cache_dir: Path | None) -> tuple[Any, str]:
    """A session that runs wholly on the EP (no CPU fallback); a compiled EPContext model is
    already the EP's cache, so there is no other."""
    from executors.runtime import parts

    found = parts.index(path)
    if found is not None:  # a split graph: its parts' sessions in a chain
        return parts.PartsSession(path.parent, found, lambda p: step_session(
            p, target, provider_options, cache_dir)[0]), "off"
    with native_log():
        return session(path, target, provider_options, cpu_fallback=False), "off"


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def errors(lines: list[str]) -> tuple[list[str], list[str]]:
    """(error lines, offending nodes) from a captured ORT/QNN log."""
    clean = [ANSI.sub("", ln) for ln in lines]
    found = [ln.split("] ", 1)[-1] for ln in clean if "[E:" in ln]
    nodes = re.findall(r"name: ([^,]+), type: ([^ }]+)", "\n".join(clean))
    return found, [f"{name} ({kind})" for name, kind in nodes]
