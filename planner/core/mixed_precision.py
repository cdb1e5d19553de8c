"""Mixed precision by module: `quant.overrides` rules and `quant.search`, checked and turned
into the quantize step's params.

A rule selects nodes (`modules`: class names or hierarchy tag paths; `op_types`;
`except_op_types`: nodes of every other op type; `nodes`: ONNX node names, as the quantize
step's input names them; several selectors select the nodes all of them select) and sets their
`weight_type` / `activation_type`, or keeps them float (`precision: float`). Later rules win.
The quantize step carries `overrides` and `search` only when they change something, so every
plan without them keeps its keys.
"""

from __future__ import annotations

from typing import Any

from planner.errors import ConfigError

SELECTORS = ("modules", "op_types", "except_op_types", "nodes")
SETTINGS = ("weight_type", "activation_type", "precision")
EXAMPLE = "e.g. {modules: [BertSelfAttention], activation_type: uint16}"


def rules(quant: dict[str, Any]) -> list[dict[str, Any]]:
    """The config's rules in canonical form (keys sorted, selector lists sorted and unique)."""
    return [{k: sorted(set(v)) if k in SELECTORS else v for k, v in sorted(rule.items())}
            for rule in quant.get("overrides") or []]


def check(quant: dict[str, Any]) -> None:
    """One clear line per rule the quantize step could not apply as written."""
    lines = []
    for i, rule in enumerate(quant.get("overrides") or []):
        where = f"quant.overrides.{i}"
        if not any(rule.get(k) for k in SELECTORS):
            lines.append(f"{where}: selects no node; give modules, op_types, except_op_types or nodes ({EXAMPLE})")
        if not any(k in rule for k in SETTINGS):
            lines.append(f"{where}: sets nothing; give weight_type, activation_type or "
                         f"precision: float ({EXAMPLE})")
        if rule.get("precision") == "float" and ({"weight_type", "activation_type"} & set(rule)):
            lines.append(f"{where}: precision: float keeps the nodes unquantized, so it takes no "
                         f"weight_type or activation_type; drop one or the other")
        if quant["kind"] == "fp16" and set(rule) & {"weight_type", "activation_type"}:
            lines.append(f"{where}: quant=fp16 has no integer types; use precision: float (the "
                         f"selected ops stay float32) or a qdq quant (quant=w8a8)")
    if quant.get("search", "none") == "auto" and quant["kind"] != "qdq":
        lines.append("quant.search=auto: the search raises QDQ precision; use a qdq quant "
                     "(quant=w8a8) or quant.search=none")
    if lines:
        raise ConfigError(*lines)


def runs_float(quant: dict[str, Any]) -> bool:
    """Whether a QDQ build may keep float nodes: a float rule, or a search that may raise a
    module to float."""
    return quant["kind"] == "qdq" and (quant.get("search", "none") == "auto" or any(
        r.get("precision") == "float" for r in quant.get("overrides") or []))


def step_params(config: dict[str, Any], margin: float = 0.0) -> dict[str, Any]:
    """The quantize step's optional params: absent when they are their defaults. `margin`: what
    the search's CPU proxy must clear beyond the threshold for the target (its QdqProfile)."""
    quant, verify = config["quant"], config["verify"]
    out: dict[str, Any] = {}
    if quant.get("overrides"):
        out["overrides"] = rules(quant)
    if quant.get("search", "none") == "auto":
        if verify["metric"] == "none":
            raise ConfigError("quant.search=auto: the search stops when verify's threshold "
                              "holds, and verify=none sets none; set verify=cosine")
        out["search"] = {"metric": verify["metric"], "threshold": verify["threshold"],
                         "samples": verify["samples"], **({"margin": margin} if margin else {})}
    return out


def needs_hierarchy(params: dict[str, Any]) -> bool:
    """Whether the quantize step reads the export's module hierarchy (to select or rank
    modules)."""
    return "search" in params or any("modules" in r for r in params.get("overrides", []))


def shown(rule: dict[str, Any]) -> str:
    """A rule as a config override reads: {modules: [BertSelfAttention], activation_type: uint16}."""
    parts = [f"{k}: [{', '.join(v)}]" if isinstance(v, list) else f"{k}: {v}"
             for k, v in rule.items()]
    return "{" + ", ".join(parts) + "}"


def as_override(found: list[dict[str, Any]]) -> str:
    """The plain config a reviewer can pin: quant.overrides=[...]."""
    return "quant.overrides=[" + ", ".join(shown(r) for r in found) + "]"
