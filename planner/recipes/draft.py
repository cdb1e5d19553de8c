"""The modelplan config an import writes, before it is YAML: the packaged option each group
starts from, the values set on top, and for each value the recipe field it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.recipes.ledger import Ledger


@dataclass
class Draft:
    choices: dict[str, str] = field(default_factory=dict)         # group -> packaged option
    why_choice: dict[str, str] = field(default_factory=dict)      # group -> recipe field
    values: dict[str, Any] = field(default_factory=dict)          # nested, set under _self_
    sources: dict[str, list[str]] = field(default_factory=dict)   # config path -> fields
    fusions: list[str] = field(default_factory=list)              # optim flags asked for

    def choose(self, group: str, option: str, because: str) -> None:
        self.choices[group] = option
        self.why_choice[group] = because

    def set(self, path: str, value: Any, because: str) -> None:
        node = self.values
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
        said = self.sources.setdefault(path, [])
        if because and because not in said:
            said.append(because)

    def get(self, path: str, default: Any = None) -> Any:
        node: Any = self.values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


@dataclass
class Context:
    """One recipe file being mapped into the shared draft."""

    ledger: Ledger
    draft: Draft
    role: str | None = None            # encoder | decoder for the files of a pair
    target: str = ""                   # the modelplan target option, once known
    kind: str = ""                     # quant kind: none | qdq | fp16 (once read)
    task: str = ""                     # the modelplan task
    model_type: str = ""               # the checkpoint's model type (aliases resolved)
    warnings: list[str] = field(default_factory=list)  # what will stop the config planning

    @property
    def pair(self) -> bool:
        return self.role is not None
