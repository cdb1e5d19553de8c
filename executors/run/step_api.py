"""The step API: what a step (executors/steps/<op>.py, `run(ctx) -> StepResult`) gets and
returns. The step wrapper (executors/run/wrapper.py) builds the context and runs the step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import MODEL
from planner.core.ops import OPS, Op
from planner.errors import StepError


@dataclass
class StepContext:
    """One step's view of the world: its plan entry, its inputs' store entries, its output dir."""

    step: dict[str, Any]             # the plan's step, with the key it is built under
    inputs: dict[str, Path]          # role -> the input step's output directory
    out: Path                        # write outputs here (a temporary dir of the store)
    progress: Callable[[str], None] = print
    cache_dir: Path | None = None    # for ONNX Runtime's optimized-model cache
    blobs: Path | None = None        # the store's weight blob pool (executors/store/weights.py)

    @property
    def params(self) -> dict[str, Any]:
        return self.step["params"]

    @property
    def id(self) -> str:
        return self.step["id"]

    @property
    def op(self) -> Op:
        return OPS[self.step["op"]]

    def input_model(self, role: str = "model") -> Path:
        return self.inputs[role] / MODEL

    def fail(self, cause: str, fix: str, where: str | None = None) -> StepError:
        """A StepError naming the step, the input, the cause and a fix."""
        src = where or ", ".join(str(p) for p in self.inputs.values()) or "no input"
        return StepError(f"step {self.id} ({self.step['op']}) failed on {src}: {cause}; {fix}")


@dataclass
class StepResult:
    metrics: dict[str, Any] = field(default_factory=dict)
