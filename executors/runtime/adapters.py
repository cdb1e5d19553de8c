"""The session adapter of each declared target (planner/core/targets.py; a step finds its
target's declaration with `of_params`).

An adapter is the module `executors/runtime/<target.session.adapter>.py`. It provides
`available()` (its EP is installed here), `session_options(target, provider_options,
cpu_fallback, configs)`, `session(path, target, provider_options, cpu_fallback, so)` and
`step_session(path, target, provider_options, cache_dir) -> (session, cache state)` (the
session verify and perf run) `sdk_version()` (the version of the EP's own SDK installed
here, or None, named `SDK`) and `context_info(compatibility)` (what a compiled context is for,
from the EP's compatibility info); the adapter of a target that compiles also provides
`errors(log lines) -> (errors, offending nodes)`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from planner.core.targets import TARGETS, Target, reference


def base_options(target: Target, configs: dict[str, str] | None = None) -> Any:
    """Session options every adapter starts from: the declared log severity and `configs`."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = target.session.log_severity
    for k, v in (configs or {}).items():
        so.add_session_config_entry(k, v)
    return so


def adapter(target: Target) -> ModuleType:
    """The module that opens sessions on `target`."""
    return importlib.import_module(f"executors.runtime.{target.session.adapter}")


def host_providers() -> list[str]:
    """The providers of host-side sessions (checks, ORT passes): the reference CPU's EP."""
    return [reference().provider]


def available_eps() -> set[str]:
    """The execution providers steps can name (`ep` params) that are installed here."""
    return {t.ep for t in TARGETS.values() if adapter(t).available()}
