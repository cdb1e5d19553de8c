"""Helpers shared by the human-facing renderers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.core.plan import ACTIONS
from planner.models import evaluation
from planner.support.units import human_bytes

MARK = dict(zip(ACTIONS, "+=-", strict=True))  # run, cached, elided
GROUP_KEYS = ("model", "optim", "quant", "target", "verify", "eval", "perf")


# What a plan says of an op's step beside its params, in words (label, text from params).
DETAILS: dict[str, tuple[tuple[str, Callable[[dict[str, Any]], str]], ...]] = {
    "eval": (("gate", evaluation.gate), ("data", evaluation.summary)),
}


def details(step: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, words) for a step whose op says more than its params (eval: gate and data)."""
    return [(label, say(step["params"])) for label, say in DETAILS.get(step["op"], ())]


def short(key: str) -> str:
    return key[:12]


def value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return v[:12]
    if isinstance(v, list) and v and isinstance(v[0], dict) and "name" in v[0]:
        return "[" + ", ".join(repeated_once([_spec(x) for x in v])) + "]"
    if isinstance(v, list) and v and isinstance(v[0], dict):  # rules: in order, as written
        return "[" + ", ".join("{" + ", ".join(
            f"{k}: [{', '.join(map(str, x))}]" if isinstance(x, list) else f"{k}: {value(x)}"
            for k, x in rule.items()) + "}" for rule in v) + "]"
    if isinstance(v, list):
        return "{" + ", ".join(repeated_once([str(x) for x in v])) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {value(x)}" for k, x in v.items()) + "}"
    return str(v)


def repeated_once(items: list[str]) -> list[str]:
    """Names that differ only in some dotted parts, one of them a number, said once:
    `past_key_values.{0..15}.{key,value}:float32[1x8x64x64]` for 32 cache inputs. Each family
    (same parts elsewhere, same type) stands where its first member stood; a family that is
    not every combination of its varying parts, or of fewer than 3, stays as it is."""
    families: dict[tuple[Any, ...], list[list[str]]] = {}
    for item in items:
        name, sep, rest = item.partition(":")
        parts = name.split(".")
        if len(parts) > 1:
            families.setdefault((len(parts), sep + rest), []).append(parts)
    said: dict[str, str | None] = {}
    for (_, tail), members in families.items():
        varying = [i for i in range(len(members[0])) if len({m[i] for m in members}) > 1]
        values = [list(dict.fromkeys(m[i] for m in members)) for i in varying]
        combos = 1
        for vals in values:
            combos *= len(vals)
        if (len(members) < 3 or combos != len(members) or len(varying) == len(members[0])
                or not any(all(x.isdigit() for x in vals) for vals in values)):
            continue
        parts = list(members[0])
        for i, vals in zip(varying, values, strict=True):
            parts[i] = _alternatives(vals)
        for n, m in enumerate(members):
            said[".".join(m) + tail] = ".".join(parts) + tail if n == 0 else None
    return [s for item in items if (s := said.get(item, item)) is not None]


def _alternatives(values: list[str]) -> str:
    if all(v.isdigit() for v in values):
        nums = [int(v) for v in values]
        if nums == list(range(nums[0], nums[0] + len(nums))):
            return f"{{{nums[0]}..{nums[-1]}}}"
    return "{" + ",".join(values) + "}"


def _spec(spec: dict[str, Any]) -> str:
    shape = "x".join(str(d) for d in spec.get("shape", []))
    return f"{spec['name']}:{spec.get('dtype', '?')}[{shape}]"


def params_line(params: dict[str, Any]) -> str:
    """Compact `k=v` list of the params that say something (paths and nulls left out)."""
    parts = [f"{k}={value(v)}" for k, v in params.items()
             if v not in (None, {}, []) and k != "path"]
    return " ".join(parts)


def headline(ir: dict[str, Any]) -> str:
    cfg = ir["config"]
    picks = "  ".join(f"{g}={cfg[g]['name']}" for g in GROUP_KEYS if "name" in cfg.get(g, {}))
    return f"{picks}  (config {short(ir['config_digest'])})"


def why(step: dict[str, Any], brief: bool = False) -> str:
    """Why a step is in the plan as it is: the rule that shaped it, or the store's answer.
    brief: name the rule only (the proof is printed elsewhere)."""
    for field, verb in (("proof", "elided by"), ("inserted_by", "inserted by"),
                        ("moved_by", "moved by")):
        if field in step:
            rule = step[field]["rule"]
            return f"{verb} {rule} (proof below)" if brief else \
                f"{verb} {rule}: {step[field]['conclusion']}"
    return step["reason"]


def premise_text(p: dict[str, Any]) -> str:
    by = p["by"]
    said = by and (p["claim"].startswith(f"{by} ") or f" {by} " in p["claim"])
    return p["claim"] + (f" (established by {by})" if by and not said else "")


def counts_line(summary: dict[str, int]) -> str:
    """The plan's one-line summary from its action counts (run, cached, elided)."""
    return (f"Plan: {summary['run']} to run, {summary['cached']} cached, "
            f"{summary['elided']} elided.")


def summary_line(ir: dict[str, Any]) -> str:
    return counts_line(ir["summary"]) + (" " + SYMBOLIC if ir.get("symbolic_sources") else "")


def peak_text(s: dict[str, Any]) -> str:
    """`; peak ~1.2 GB`: a step's expected peak memory, when the plan has one."""
    return f"; peak ~{human_bytes(s['memory']['peak'])}" if "memory" in s else ""


def memory_line(ir: dict[str, Any]) -> str | None:
    """The run's expected peak, the weights it is estimated from, and the limit it is held to
    (named, not measured: a plan reads the same on every machine)."""
    mem = ir.get("memory")
    if not mem:
        return None
    w = mem["weights"]
    asked = ir["config"].get("run", {}).get("max_memory")
    held = f"held to run.max_memory={asked}" if asked is not None else \
        "held to this machine's available memory (run.max_memory=null)" \
        if ir["config"]["executor"]["name"] == "local" else "no limit set (run.max_memory=null)"
    where = f"at {mem['step']}" if mem["step"] else "nothing to run"
    how = "one step at a time" if ir["config"]["executor"]["name"] == "local" else \
        "per step, on its node"
    return (f"Memory: peak ~{human_bytes(mem['peak'])} {where}, {how} "
            f"(weights: {w['params'] / 1e6:.1f} M parameters, {human_bytes(w['stored'])} "
            f"{w['dtype']}, from {w['basis']}); {held}.")


SYMBOLIC = "Symbolic source keys: for review only, `apply` refuses this plan."


def symbolic_notes(ir: dict[str, Any]) -> list[str]:
    """Why a plan's source keys are symbolic, one line per source (none for a real plan)."""
    return [f"symbolic source key for {x['step']}: {x['reason']}"
            for x in ir.get("symbolic_sources", [])]
