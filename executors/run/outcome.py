"""What the scheduler hands a runner (`Work`), what a runner must do (`Runner`), and what comes
back (`StepOutcome`): the typed contract between the one scheduler (executors/run/stepdag.py)
and the runners executor plugins supply (the local warm workers, Ray tasks), in the way
Bazel's SpawnRunners take a spawn and return a SpawnResult.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
UNELIDED = "unelided"  # an elided step whose premises do not hold on its real input


@dataclass
class StepOutcome:
    """One unique step's outcome. `path` is where its output is (an elided step's: its
    input's); `started` the epoch time a built step began, `ended` when the scheduler saw it
    end; `worker` the local warm worker and `node` the Ray node ({id, ip}) that ran it."""

    status: str
    action: str = "run"
    path: str | None = None
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0
    outputs: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    proof_check: dict[str, Any] | None = None
    error: str | None = None
    quarantined: dict[str, Any] | None = None
    started: float | None = None
    worker: str | None = None
    node: dict[str, str] | None = None
    ended: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == OK

    def record_fields(self) -> dict[str, Any]:
        """The fields a step record takes from this outcome (executors/run/records.py); where
        it ran only when something says so."""
        fields = asdict(self)
        for name in ("path", "ended"):
            fields.pop(name)
        for name in ("started", "worker", "node"):
            if fields[name] is None:
                fields.pop(name)
        return fields


def failed(error: str) -> StepOutcome:
    return StepOutcome(status=FAILED, error=error)


def skipped(why: str = "an input step failed") -> StepOutcome:
    return StepOutcome(status=SKIPPED, error=why)


@dataclass(frozen=True)
class Work:
    """One ready step for a runner (an elided one: its premises to re-check on its input,
    `check_elision`): the plan's step (its IR), the key it is built under, its
    inputs' output directories by role, where an uncached output goes, and its place in the
    run (`label`, for progress lines; `turn`, the how-many-th measurement it is)."""

    step: dict[str, Any]
    key: str
    inputs: dict[str, Path]
    out_dir: Path | None
    label: str
    turn: int = 0


class Runner(Protocol):
    """Runs ready steps for the scheduler. `slots`: steps it may run at once;
    `measure_slots`: measurements (steps that time this machine) at once, after every build."""

    name: str
    slots: int
    measure_slots: int

    def can_run(self, step: dict[str, Any]) -> bool:
        """Whether this runner can run the step at all (its op and execution provider)."""
        ...

    def start(self, work: Work) -> Future[StepOutcome]:
        """Start the step; a future of its outcome (already done if it ran inline)."""
        ...

    def finished(self, work: Work, outcome: StepOutcome) -> None:
        """Say what the runner adds to a finished step's progress line, if anything."""
        ...

    def stop(self) -> None:
        """An interrupt: end every running step now and wait until their cleanup is done."""
        ...
