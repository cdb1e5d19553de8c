"""Sessions on ONNX Runtime's CPU EP, the adapter of the reference target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from executors.runtime.adapters import base_options
from planner.core.targets import Target


def available() -> bool:
    return True  # ONNX Runtime's own EP: every install has it


SDK = "SDK"


def context_info(compatibility: str) -> dict[str, Any]:
    """The CPU EP compiles no context."""
    return {}


def sdk_version() -> None:
    """The CPU EP has no SDK of its own: ONNX Runtime's version says it all."""
    return


def session_options(target: Target, provider_options: dict[str, Any],
                    cpu_fallback: bool = True, configs: dict[str, str] | None = None) -> Any:
    return base_options(target, configs)


def session(path: Path, target: Target, provider_options: dict[str, Any] | None = None,
            cpu_fallback: bool = True, so: Any = None) -> Any:
    from executors.runtime.session_cache import host_session

    so = so or session_options(target, provider_options or {}, cpu_fallback)
    return host_session(path, so, [target.provider])


def step_session(path: Path, target: Target, provider_options: dict[str, Any],
                 cache_dir: Path | None) -> tuple[Any, str]:
    """A session through the optimized-model cache, and the cache's state."""
    from executors.runtime import parts
    from executors.runtime.session_cache import cpu_session

    split = parts.index(path)
    if split is not None:  # a split graph: its parts' sessions in a chain
        return parts.PartsSession(path.parent, split, lambda p: step_session(
            p, target, provider_options, cache_dir)[0]), "parts"
    found, info = cpu_session(path, cache_dir)
    return found, info.state

