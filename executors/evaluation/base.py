"""What a task family implements for `eval`, and what it is given.

An `Evaluator` turns dataset rows into graph feeds (`prepare`, one feed of batch 1 per row),
graph outputs into one prediction per row (`predict`), rows into the truth (`truth`, None when
the dataset has no label column: then PyTorch's own predictions are the truth) and predictions
against the truth into the task's metrics (`score`, the names planner/models/evaluation.py
declares). A family that runs a loop over several graphs (generation) overrides `predictions`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.models.roles import ROLES, Trace

Feed = dict[str, np.ndarray]
Forward = Callable[[Feed], dict[str, np.ndarray]]   # one graph: named inputs -> named outputs


class EvalDataError(ValueError):
    """A dataset that cannot be evaluated as given: one line naming the column and a fix."""


@dataclass
class Context:
    """What a family may read: the task, the graphs' input specs and output names, the
    checkpoint (its config.json as `info`), whether the dataset has labels and the names of
    its ClassLabel columns (a column of class ids whose order may not be the model's)."""

    task: str
    specs: dict[str, list[dict[str, Any]]]     # graph -> input specs
    outputs: dict[str, list[str]]              # graph -> output names
    checkpoint: Path | None
    info: dict[str, Any] = field(default_factory=dict)
    labelled: bool = False
    label_names: dict[str, list[str]] = field(default_factory=dict)  # role -> ClassLabel names
    baseline: list[Any] = field(default_factory=list)  # PyTorch's predictions, once scored
    model_class: str | None = None             # the class the plan loads (CLIP towers...)

    @property
    def inputs(self) -> list[dict[str, Any]]:
        """The inputs a dataset row feeds: the single graph's, or an encoder-decoder's encoder's."""
        return next((specs for graph, specs in self.specs.items()
                     if graph in ROLES and ROLES[graph].trace in (Trace.MODEL, Trace.ENCODER)),
                    [])

    def id2label(self) -> dict[int, str]:
        return {int(k): str(v) for k, v in (self.info.get("id2label") or {}).items()}


@dataclass
class Prepared:
    feeds: list[Feed]                          # one per row, batch 1
    rows: list[dict[str, Any]]                 # the rows, by role
    extra: list[Any] = field(default_factory=list)  # per row: what predict needs (offsets...)


class Evaluator:
    """A task family; subclasses set `tasks` and implement the four steps."""

    tasks: tuple[str, ...] = ()

    def prepare(self, rows: list[dict[str, Any]], cx: Context) -> Prepared:
        raise NotImplementedError

    def predict(self, outputs: list[dict[str, np.ndarray]], prepared: Prepared,
                cx: Context) -> list[Any]:
        raise NotImplementedError

    def truth(self, prepared: Prepared, cx: Context) -> list[Any] | None:
        raise NotImplementedError

    def score(self, predictions: list[Any], truth: list[Any], cx: Context) -> dict[str, float]:
        raise NotImplementedError

    def notes(self, cx: Context) -> list[str]:
        """What the record should say about how the predictions were read (e.g. token ids
        compared because the checkpoint has no tokenizer)."""
        return []

    def predictions(self, graphs: dict[str, Forward], prepared: Prepared, cx: Context,
                    progress: Callable[[int], None]) -> list[Any]:
        """Predictions of one model (PyTorch, or an ONNX graph) on every row."""
        forward = graphs["model"]
        outputs = []
        for i, feed in enumerate(prepared.feeds):
            outputs.append(forward(feed))
            progress(i)
        return self.predict(outputs, prepared, cx)


def first(value: Any) -> np.ndarray:
    """Row 0 of a batch-1 output."""
    return np.asarray(value)[0]
