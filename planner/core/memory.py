"""Memory is planned like time: each step's expected peak, from how its op's peak scales with
the model (`Op.memory`, planner/core/ops.py) applied to the checkpoint's weights
(planner/models/footprint.py), the build's precision and its parts; the run's peak; and the
refusal, before anything runs, of a build whose largest step cannot fit `run.max_memory`
(default: the memory this machine has available when the plan is made or run), naming what
makes it fit.

The limit itself is never written into the plan, so a plan stays the same on every machine: a
plan holds the estimates, and the limit they are held to is resolved where they are checked
(here, and by the scheduler, which keeps the steps it runs side by side within it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.core.ops import Trait, bits
from planner.core.plan import Plan, Step
from planner.errors import PlanError
from planner.models.footprint import Weights
from planner.support.machine import available_memory
from planner.support.memo import remembered
from planner.support.units import human_bytes, parse_bytes

RUNTIME = int(0.3 * 2**30)  # a step's process before it reads the model (Python, torch, ORT)
COORDINATOR = int(0.15 * 2**30)  # the process that runs the plan and its idle workers (PSS)
AS_SAVED = ("bfloat16", "float16")  # checkpoint dtypes a step may handle as saved (Memory.narrow)
LAYERWISE_FROM = 2**30  # quant.layerwise=auto: graphs of this many weight bytes or more


def weight_bits(config: dict[str, Any]) -> int:
    """The bits each weight has after quantize (32 when the build does not quantize)."""
    quant = config["quant"]
    return 16 if quant["kind"] == "fp16" else 32 if quant["kind"] == "none" else \
        bits(quant["weight_type"])


def parts(plan: Plan) -> int:
    """Into how many parts the plan cuts each graph (1: not cut)."""
    return max((s.params.get("parts", 1) for s in plan.live()
                if s.decl.has(Trait.CUTS_GRAPH)), default=1)


def step_peak(s: Step, weights: Weights, wbits: int, cut: int) -> int:
    """The expected peak of one step's process, in bytes."""
    scale = s.decl.memory
    narrower = weights.stored < weights.fp32
    as_saved = narrower and weights.dtype in AS_SAVED  # export traces these in their dtype
    factor = scale.layerwise if scale.layerwise is not None and layerwise(s, weights) else \
        scale.factor(wbits, as_saved)
    loads = scale.no_checkpoint_with is None or scale.no_checkpoint_with not in s.inputs
    grows = factor * weights.fp32 + loads * (scale.checkpoint * weights.stored
                                             + (scale.upcast * weights.fp32 if narrower else 0))
    return RUNTIME + int(grows / (cut if scale.per_part else 1))


def layerwise(s: Step, weights: Weights) -> bool:
    """Does the step handle its graph layer by layer (executors/onnx/layerwise.py)? Its
    `layerwise` param (absent: auto, by the size of the weights). A graph the step then finds
    it cannot cut (no repeated block, a bias two pieces read) is quantized whole: 3.0x, not
    the 1.9x planned."""
    if s.params.get("kind") == "fp16" or s.params.get("search"):
        return False  # a float16 conversion and the repair search handle the whole graph
    mode = s.params.get("layerwise", "auto")
    return mode == "always" or (mode == "auto" and weights.fp32 >= LAYERWISE_FROM)


def estimate(plan: Plan) -> None:
    """Set each live step's expected peak and the run's (`plan.memory`: its largest step to
    run, and the process that runs the plan); nothing when the checkpoint's size is unknown
    (a symbolic source, a config that names no widths)."""
    weights = plan.weights
    if weights is None:
        return
    wbits, cut = weight_bits(plan.config), parts(plan)
    for s in plan.live():
        s.memory = step_peak(s, weights, wbits, cut)
    running = [s for s in plan.live() if s.action == "run"]
    top = max(running, key=lambda s: s.memory or 0, default=None)
    peak = COORDINATOR + (top.memory or 0) if top else 0
    plan.memory = {"peak": peak, "step": top.id if top else None,
                   "weights": weights.to_json()}


def limit(config: dict[str, Any]) -> tuple[int | None, str]:
    """The bytes a run may use and what set them: run.max_memory, else this machine's
    available memory now (None where the system does not say)."""
    asked = config.get("run", {}).get("max_memory")
    if asked is not None:
        return parse_bytes(asked), f"run.max_memory={asked}"
    if config["executor"]["name"] != "local":  # its steps run on other machines
        return None, "run.max_memory=null"
    return (remembered("available-memory", None, available_memory),
            "this machine's available memory (run.max_memory=null)")


def check(plan: Plan, fitting: Callable[[int], list[str]] | None = None) -> None:
    """Refuse, in one line before anything runs, a plan whose largest step to run cannot fit
    the limit, naming the setting that makes it fit. Steps run side by side only within the
    limit (the scheduler holds the others back), so the largest step is what must fit.
    `fitting(limit)`: settings found, by planning again, to bring the run under the limit."""
    weights = plan.weights
    if weights is None or not plan.memory or not plan.memory["step"]:
        return
    cap, said = limit(plan.config)
    if cap is None or plan.memory["peak"] <= cap:
        return
    worst = plan.step(plan.memory["step"])
    raise PlanError(f"the run needs about {human_bytes(plan.memory['peak'])} at its peak, in "
                    f"step {worst.id} ({human_bytes(weights.fp32)} of weights as fp32), over the "
                    f"{human_bytes(cap)} of {said}; "
                    f"{_fix(plan, worst, cap, fitting(cap) if fitting else [])}; "
                    "nothing was run")


def checks_over(plan: Plan, cap: int) -> tuple[list[str], int] | None:
    """The overrides that leave out every step to run over `cap` (each a check of the
    deliverable: its op's `dropped_by`), with the run's peak without them; None when no step is
    over, or one over it is not such a check."""
    running = [s for s in plan.live() if s.action == "run" and s.memory is not None]
    over = [s for s in running if COORDINATOR + s.memory > cap]
    drops = sorted({s.decl.dropped_by for s in over})
    if not over or not all(drops):
        return None
    rest = max((s.memory for s in running if s.decl.dropped_by not in drops), default=0)
    return drops, COORDINATOR + rest


def _fix(plan: Plan, worst: Step, cap: int, found: list[str]) -> str:
    """The setting that brings the run under `cap`: `found` (settings planned again that fit),
    leaving out the checks that need the most (verify=none, eval=none) when every other step
    fits, else a larger run.max_memory."""
    running = [s for s in plan.live() if s.action == "run"]
    fixes = list(found)
    drop = worst.decl.dropped_by
    left = checks_over(plan, cap)
    if drop and left is not None and left[0] == [drop]:
        # the checks left out suffice: no more parts with them
        fixes = [f for f in fixes if drop not in f.partition(" (")[0].split()]
        fixes.append(f"{drop} (which leaves out {worst.id})")
    needed = -(-(COORDINATOR + max(s.memory or 0 for s in running)) // 2**30)
    fixes.append(f"run.max_memory={needed}GB on a machine that has that much free")
    return "set " + ", or ".join(fixes)
