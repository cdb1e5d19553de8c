"""The ledger of one recipe's fields: every leaf field is either mapped onto the modelplan
config (or found to be what modelplan does anyway) or dropped with a reason. A field nobody
took is reported at the end, so none is ever dropped silently."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from planner.errors import ConfigError

MAPPED, DROPPED = "mapped", "dropped"
# Fields read as a whole rather than leaf by leaf (lists of tensor specs, label maps...).
WHOLE = ("export.input_tensors", "export.output_tensors", "export.dynamic_axes",
         "eval.dataset.label_mapping", "compile.ep_config.provider_options", "quant.op_types_to_quantize",
         "quant.nodes_to_exclude", "quant.fp16_op_block_list")


@dataclass(frozen=True)
class Entry:
    field: str                     # the recipe field, dotted (a pair's prefixed by its role)
    value: Any
    outcome: str                   # mapped | dropped
    config: str | None = None      # the modelplan config path it sets
    steps: tuple[str, ...] = ()    # the ops it shapes
    note: str = ""                 # how it maps, or why it is dropped

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "value": show(self.value), "outcome": self.outcome,
                "config": self.config, "steps": list(self.steps), "note": self.note}


def show(value: Any) -> str:
    """A recipe value as the report prints it (JSON, shortened)."""
    text = json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= 80 else text[:77] + "..."


class Unsupported(ConfigError):
    """The recipe asks for what modelplan does not build (a target, a mode, a model)."""

    def __init__(self, field_name: str, why: str) -> None:
        super().__init__(f"{field_name}: {why}")
        self.field, self.why = field_name, why


class BadField(ConfigError):
    """A recipe field has a value winml-cli itself would refuse (or that cannot be read)."""

    def __init__(self, field_name: str, why: str) -> None:
        super().__init__(f"{field_name}: {why}")
        self.field, self.why = field_name, why


@dataclass
class Ledger:
    recipe: dict[str, Any]
    prefix: str = ""               # "encoder:" for the files of a pair
    leaves: dict[str, Any] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.leaves = dict(flatten(self.recipe))

    def has(self, path: str) -> bool:
        return path in self.leaves or any(k.startswith(path + ".") for k in self.leaves)

    def get(self, path: str, default: Any = None) -> Any:
        """A field's value without taking it (None when absent)."""
        node: Any = self.recipe
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def pending(self, section: str) -> list[str]:
        """Fields under `section` nobody took yet."""
        return [k for k in self.leaves if k == section or k.startswith(section + ".")]

    def mapped(self, path: str, config: str | None, steps: tuple[str, ...], note: str = "",
               value: Any = ...) -> None:
        self._add(path, MAPPED, config, steps, note, value)

    def dropped(self, path: str, why: str, value: Any = ...) -> None:
        self._add(path, DROPPED, None, (), why, value)

    def _add(self, path: str, outcome: str, config: str | None, steps: tuple[str, ...],
             note: str, value: Any) -> None:
        taken = [k for k in self.leaves if k == path or k.startswith(path + ".")]
        if value is ...:
            value = self.get(path) if taken else None
        for k in taken:
            del self.leaves[k]
        self.entries.append(Entry(self.prefix + path, value, outcome, config, steps, note))

    def leftovers(self, why: str) -> None:
        """Report every field nobody took."""
        for path in list(self.leaves):
            if path in self.leaves:
                self.dropped(path, why)


def flatten(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Leaf fields as (dotted path, value); empty sections are leaves, WHOLE fields too."""
    if isinstance(node, dict) and node and prefix.rstrip(".") not in WHOLE:
        return [kv for k, v in node.items() for kv in flatten(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), node)] if prefix else []
