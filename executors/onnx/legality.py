"""What a target rejects in a graph: the checker of the legal_for fact, and legalize's check
that nothing is left after its rewrites. Which rewrites a target has is its declaration's
`legalizer` (planner/core/targets.py): `executors/onnx/<legalizer>_rewrites.py`."""

from __future__ import annotations

import importlib
from types import ModuleType

import onnx

from planner.core.targets import named


def rewrite_set(target: str) -> ModuleType | None:
    """The module of the rewrites `target`'s legalizer names (REWRITES, violations, FLOOR), or
    None when the target needs none."""
    legalizer = named(target).legalizer
    return importlib.import_module(f"executors.onnx.{legalizer}_rewrites") if legalizer else None


def violations(model: onnx.ModelProto, target: str) -> list[str]:
    """What `target` rejects in `model`, one line each naming the node or constant."""
    rewrites = rewrite_set(target)
    return rewrites.violations(model) if rewrites else []
