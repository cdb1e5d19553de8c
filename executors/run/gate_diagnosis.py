"""When a run's gate fails (verify or eval), where the accuracy went: the CPU diagnosis of the
run's own tagged QDQ graph against its fp32 reference (executors/diagnosis/module_error.py), both
store entries of the plan, as `accuracy` rows of the run record. It is no step (no key
changes, nothing is cached); it runs only after a gate failed."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from executors.onnx.artifacts import MODEL
from planner.core import diagnosis

FIELDS = ("tag", "class", "nodes", "sqnr_db", "cosine", "own_sqnr_db", "own_cosine",
          "inherited")
DEFAULT_SAMPLES = 4


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def record_fields(ir: dict[str, Any], steps: list[dict[str, Any]],
                  say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """{"accuracy": rows} after a failed gate, {"accuracy_error": why} when the diagnosis
    could not be made, {} when no gate failed or the gate compares no quantized graph."""
    gate = diagnosis.failed_gate(ir, steps)
    found = diagnosis.roles(ir, gate) if gate else None
    if found is None:
        return {}
    reference, tagged, source = found
    ref_dir, cand_dir = (diagnosis.entry(ir, steps, s) for s in (reference, tagged))
    if ref_dir is None or cand_dir is None:
        return {"accuracy_error": f"{gate} failed, but {reference} or {tagged} has no output "
                                  "in the store to diagnose"}
    src_dir = diagnosis.entry(ir, steps, source) if source else None
    gate_step = next(s for s in ir["steps"] if s["id"] == gate)
    samples = gate_step["params"].get("samples") or DEFAULT_SAMPLES
    if say:
        say(f"{gate} failed: diagnosing {tagged} against {reference} per module (CPU EP, "
            f"{samples} samples)")
    try:
        from executors.diagnosis.module_error import diagnose

        result = diagnose(ref_dir / MODEL, cand_dir / MODEL, src_dir, samples)
    except Exception as exc:  # noqa: BLE001 - the run's own failure stays the record's error
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        return {"accuracy_error": f"the per-module diagnosis failed: {cause}"}
    return {"accuracy": [{k: _finite(r.get(k)) for k in FIELDS} for r in result["modules"]]}
