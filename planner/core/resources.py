"""What each step asks of a Ray cluster (`executor=ray`), from op declarations and the
executor's config: `modelplan plan` shows it and the Ray executor requests exactly it.

Every step asks for one CPU. A step whose op needs an execution-provider device
(Trait.NEEDS_EP, on a target that declares a device resource) also asks for one unit of that
custom resource (`qnn_htp`), so Ray places it only on nodes started with
`ray start --resources '{"qnn_htp": 1}'`. A step that measures the machine
(Trait.NOT_CACHEABLE) takes a whole node. `executor.resources.<op>` sets or adds amounts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.core.ops import OPS, Trait
from planner.core.targets import of_params

TASK_ARGS = ("num_cpus", "num_gpus", "memory")  # Ray's own task options; others are custom
DEFAULT = {"num_cpus": 1.0}


@dataclass(frozen=True)
class Request:
    """Resource amounts one step's task asks for; `whole_node`: it runs alone on its node."""

    amounts: dict[str, float]
    whole_node: bool = False

    @property
    def custom(self) -> dict[str, float]:
        """The custom resources (e.g. qnn_htp), as Ray's `resources=` takes them."""
        return {k: v for k, v in self.amounts.items() if k not in TASK_ARGS and v > 0}

    @property
    def task_args(self) -> dict[str, float]:
        return {k: v for k, v in self.amounts.items() if k in TASK_ARGS}

    def describe(self) -> str:
        parts = [f"{k}={_amount(k, v)}" for k, v in self.amounts.items() if v > 0 or k in DEFAULT]
        return " ".join(parts) + (", whole node" if self.whole_node else "")


def _amount(name: str, value: float) -> str:
    if name == "memory":
        return f"{value / 2**30:.1f}GiB"
    return f"{value:g}"


def device(step: dict[str, Any]) -> str | None:
    """The custom resource naming the device a step needs (its target, e.g. qnn_htp), or None
    when it runs on the host CPU."""
    if not OPS[step["op"]].has(Trait.NEEDS_EP):
        return None
    return of_params(step["params"]).resource


def request(step: dict[str, Any], executor: dict[str, Any]) -> Request:
    """What `step` asks for under the executor config `executor` (config["executor"])."""
    amounts = dict(DEFAULT)
    if name := device(step):
        amounts[name] = 1.0
    amounts.update({k: float(v) for k, v in (executor.get("resources") or {})
                    .get(step["op"], {}).items()})
    return Request(amounts, whole_node=OPS[step["op"]].has(Trait.NOT_CACHEABLE))


def shown(ir: dict[str, Any]) -> bool:
    """Plans show resources when they will run on Ray."""
    return ir["config"]["executor"]["name"] == "ray"


def devices(irs: list[dict[str, Any]]) -> list[str]:
    """The devices the plans' steps need (e.g. qnn_htp), sorted."""
    return sorted({name for ir in irs for s in ir["steps"] if (name := device(s))})


def footer(ir: dict[str, Any]) -> str | None:
    """One line on which nodes the steps asking for custom resources can run on, or None."""
    names = sorted({name for s in ir["steps"]
                    for name in request(s, ir["config"]["executor"]).custom})
    if not names:
        return None
    flags = ", ".join(f'"{n}": 1' for n in names)
    return (f"Ray: steps needing {', '.join(names)} run only on nodes started with "
            f"`ray start --resources '{{{flags}}}'`.")
