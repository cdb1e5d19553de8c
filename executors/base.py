"""What every step implementation gets and returns, and how an op finds its implementation."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import StepError
from planner.ops import OPS

MODEL = "model.onnx"
SOURCE = "source.json"
METRICS = "metrics.json"
SIDECAR = "model_htp_metadata.json"


@dataclass
class StepContext:
    """One step's view of the world: its plan entry, its inputs' store entries, its output dir."""

    step: dict[str, Any]
    inputs: dict[str, Path]          # role -> the input step's output directory
    out: Path                        # write outputs here (a temporary dir of the store)
    facts: dict[str, Any]            # facts the plan says this step's output has (to stamp)
    progress: Callable[[str], None] = print
    cache_dir: Path | None = None    # for ONNX Runtime's optimized-model cache

    @property
    def params(self) -> dict[str, Any]:
        return self.step["params"]

    @property
    def id(self) -> str:
        return self.step["id"]

    def input_model(self, role: str = "model") -> Path:
        return self.inputs[role] / MODEL

    def fail(self, cause: str, fix: str, where: str | None = None) -> StepError:
        """A StepError naming the step, the input, the cause and a fix."""
        src = where or ", ".join(str(p) for p in self.inputs.values()) or "no input"
        return StepError(f"step {self.id} ({self.step['op']}) failed on {src}: {cause}; {fix}")


@dataclass
class StepResult:
    metrics: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # observed corrections to plan facts


def module_name(op: str) -> str:
    return f"executors.steps.{op}"


def has_implementation(op: str) -> bool:
    return op in OPS and importlib.util.find_spec(module_name(op)) is not None


def implementation(op: str) -> Callable[[StepContext], StepResult]:
    if op not in OPS:  # never import a module a plan names unless it is a declared op
        raise StepError(f"op '{op}' is not a modelplan op; re-plan with this version")
    return importlib.import_module(module_name(op)).run
