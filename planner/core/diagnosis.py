"""Which store entries a per-module accuracy diagnosis compares, read from a plan and its run
record: a gate step's (verify's or eval's) fp32 reference, and the tagged quantized graph its
candidate is built from (the tag step after a quantize; a compiled candidate is compiled from
it). Pure: plans and records are plain dicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.core.ops import OPS

GATES = ("verify", "eval")  # ops whose failure asks where the accuracy went
# what a gate's failure says when it is its verdict (verify fails the step, no metric kept,
# and writes its message with this phrase)
VERDICTS = {"verify": "is below verify.threshold"}


def ancestors(steps: dict[str, dict[str, Any]], step_id: str) -> list[str]:
    """Every step `step_id` reads, directly or not."""
    out, todo = [], list(steps[step_id].get("inputs", {}).values())
    while todo:
        s = todo.pop()
        if s not in out:
            out.append(s)
            todo += list(steps[s].get("inputs", {}).values())
    return out


def roles(ir: dict[str, Any], gate_id: str) -> tuple[str, str, str | None] | None:
    """(fp32 reference step, tagged quantized step, source step) of the gate step `gate_id`;
    None when its candidate is no tagged quantized graph (nothing to compare per module)."""
    steps = {s["id"]: s for s in ir["steps"]}
    gate = steps[gate_id]
    inputs = gate.get("inputs", {})
    if "reference" not in inputs or "candidate" not in inputs:
        return None
    chain = [inputs["candidate"], *ancestors(steps, inputs["candidate"])]
    tagged = [s for s in chain if steps[s]["op"] == "tag"
              and any(steps[a]["op"] == "quantize" for a in ancestors(steps, s))]
    if not tagged:
        return None
    return inputs["reference"], tagged[0], inputs.get("source")


def failed_gate(ir: dict[str, Any], record_steps: list[dict[str, Any]]) -> str | None:
    """The id of the gate step that failed on its verdict in a run, if one did: an op whose
    declared gate metric is set (eval's regression), or verify below its threshold; a gate
    that failed for another reason (no tokenizer, a session that would not open) is none."""
    planned = {s["id"] for s in ir["steps"]}
    for s in record_steps:
        if s["op"] not in GATES or s["status"] != "failed" or s["id"] not in planned:
            continue
        gate = OPS[s["op"]].gate
        if (gate and (s.get("metrics") or {}).get(gate)) or \
                VERDICTS.get(s["op"], "\0") in (s.get("error") or ""):
            return s["id"]
    return None


def entry(ir: dict[str, Any], record_steps: list[dict[str, Any]], step_id: str) -> Path | None:
    """The store entry a step's output is in (an elided step's: its model input's); None when
    the step has no output (it failed, or was skipped)."""
    ran = {s["id"]: s for s in record_steps}
    planned = {s["id"]: s for s in ir["steps"]}
    while step_id in ran and not ran[step_id]["outputs"]:
        if ran[step_id]["status"] != "ok" or "model" not in planned[step_id]["inputs"]:
            return None
        step_id = planned[step_id]["inputs"]["model"]
    if step_id not in ran:
        return None
    return Path(next(iter(ran[step_id]["outputs"].values()))).parent
