"""Mixture-of-experts blocks of transformers' experts signature, `forward(hidden_states,
top_k_index, top_k_weights)`, written as their own loop over the experts a batch hits (DBRX,
LongCat-Flash, Step3p7) rather than through transformers' experts interface, whose
`batched_mm` the model loader chooses (runtime/torchmodel.py).

Traced, such a loop keeps only the experts the example input picked: the number of experts hit,
a Split of their token counts or an expert's index are the example's, so that the graph fails
(a Split larger than its input) or computes other experts on other inputs. Here each such block
runs every expert on every token, each through the block's own forward with every token routed
to that expert alone (its first pick at weight 1, its other picks the same expert at weight 0:
the trace's loop always hits that one expert, and what it traces holds for any input), and sums the experts' outputs weighted by each token's routing
weight for that expert (0 where the token did not pick it). The result is the block's, summed
in another order; the cost is every expert's projections for every token, which a graph of
fixed shapes pays anyway."""

from __future__ import annotations

import inspect
import types
from typing import Any

SIGNATURE = ("hidden_states", "top_k_index", "top_k_weights")
# where such a block says how many experts its indices range over, in order of preference: a
# block with identity ("zero") experts besides its routed ones counts both in its total
COUNTS = ("total_experts", "num_experts", "moe_num_experts", "num_local_experts",
          "n_routed_experts")


def densify(model: Any, fixed: bool = False) -> int:
    """Make every own-loop experts block of `model` dense (above); how many were made so.
    fixed: the graph traced has fixed shapes, so the routing each expert's pass is given is a
    constant of the traced shapes, and the block's own index arithmetic over it (its one-hot
    mask, the tokens it gathers) folds into constants; with free axes it follows the input's
    shape."""
    made = 0
    for module in model.modules():
        count = _own_loop_experts(module)
        if count:
            module.forward = types.MethodType(_dense(type(module).forward, count, fixed),
                                              module)
            made += 1
    return made


def _own_loop_experts(module: Any) -> int:
    """The number of experts of a block with the experts signature that does not dispatch
    through transformers' experts interface (its forward is the class's own), else 0."""
    forward = type(module).__dict__.get("forward")
    if forward is None or "forward" in vars(module) or hasattr(forward, "__wrapped__"):
        return 0  # inherited, made dense already, or transformers' interface wraps it
    try:
        names = tuple(inspect.signature(forward).parameters)[1:4]
    except (TypeError, ValueError):
        return 0
    if names != SIGNATURE:
        return 0
    return next((int(v) for k in COUNTS
                 if isinstance(v := getattr(module, k, None), int) and v > 0), 0)


def _dense(forward: Any, count: int, fixed: bool) -> Any:
    def dense(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any,
              *args: Any, **kwargs: Any) -> Any:
        import torch

        # every token's first pick is the expert at weight 1, its other picks the same expert
        # at weight 0: the block's own shapes (k picks a token), one expert's output
        if fixed:  # constants of the traced shape (int() of a traced size is its value)
            shape = tuple(int(d) for d in top_k_index.shape)
            alone = torch.zeros(shape, dtype=top_k_weights.dtype)
            alone[..., 0] = 1
            index = [torch.full(shape, e, dtype=top_k_index.dtype) for e in range(count)]
        else:
            alone = torch.cat([torch.ones_like(top_k_weights[..., :1]),
                               torch.zeros_like(top_k_weights[..., 1:])], dim=-1)
            index = [torch.full_like(top_k_index, e) for e in range(count)]
        total = None
        for expert in range(count):
            routed = forward(self, hidden_states, index[expert], alone, *args, **kwargs)
            picked = (top_k_index == expert).to(top_k_weights.dtype)
            weight = (top_k_weights * picked).sum(-1).to(routed.dtype)
            term = routed * weight.reshape(*routed.shape[:-1], 1)
            total = term if total is None else total + term
        return total

    return dense
