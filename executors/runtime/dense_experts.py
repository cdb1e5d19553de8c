"""Mixture-of-experts blocks of transformers' experts signature, `forward(hidden_states,
top_k_index, top_k_weights)`, written as their own loop over the experts a batch hits (DBRX,
LongCat-Flash, Step3p7) rather than through transformers' experts interface, whose
`batched_mm` the model loader chooses (runtime/torchmodel.py).

Traced, such a loop keeps only the experts the example input picked: the number of experts hit,
a Split of their token counts or an expert's index are the example's, so that the graph fails
(a Split larger than its input) or computes other experts on other inputs. Here each such block
runs every expert on every token, each through the block's own forward with every token routed
to that expert alone (one pick at weight 1; a block that needs its k picks gets the others at
the same expert and weight 0: LongCat-Flash's loop fails on one): the trace's loop always hits
that one expert, and what it traces holds for any input. The experts' outputs are summed
weighted by each token's routing weight for that expert (0 where the token did not pick it), in
the wider of the outputs' and the weights' dtypes. The result is the block's, summed in another
order; the cost is each expert's projections for every token (its picks' worth where the block
needs them all) instead of the k picked, and no Split, Loop or count of tokens per expert."""

from __future__ import annotations

import inspect
import types
from typing import Any

SIGNATURE = ("hidden_states", "top_k_index", "top_k_weights")
# where such a block says how many experts its indices range over, in order of preference: a
# block with identity ("zero") experts besides its routed ones counts both in its total
COUNTS = ("total_experts", "num_experts", "moe_num_experts", "num_local_experts",
          "n_routed_experts")
INTERFACE_FILE = "integrations/moe.py"  # transformers' experts interface wraps forwards here
FIXED = "_dense_experts_fixed"  # the block's attribute: its routing is of the traced shapes
PICKS = "_dense_experts_picks"  # the block's attribute: the picks each pass gives a token


def densify(model: Any, fixed: bool = False) -> int:
    """Make every own-loop experts block of `model` dense (above), or set how an already dense
    one builds its routing; how many blocks are dense. fixed: the graph traced next has fixed
    shapes, so the routing each expert's pass is given is a constant of the traced shapes, and
    the block's own index arithmetic over it (its one-hot mask, the tokens it gathers) folds
    into constants; with free axes it follows the input's shape."""
    made = 0
    for module in model.modules():
        if FIXED in vars(module):
            setattr(module, FIXED, fixed)
            made += 1
        elif count := _own_loop_experts(module):
            setattr(module, FIXED, fixed)
            module.forward = types.MethodType(_dense(type(module).forward, count), module)
            made += 1
    return made


def _own_loop_experts(module: Any) -> int:
    """The number of experts of a block with the experts signature whose forward is its
    class's own (not transformers' experts interface), else 0."""
    forward = type(module).__dict__.get("forward")
    if forward is None or "forward" in vars(module) or \
            getattr(getattr(forward, "__code__", None), "co_filename", "").endswith(
                INTERFACE_FILE):
        return 0  # inherited, or dispatched by transformers' interface
    try:
        names = tuple(inspect.signature(forward).parameters)[1:4]
    except (TypeError, ValueError):
        return 0
    if names != SIGNATURE:
        return 0
    return next((int(v) for k in COUNTS
                 if isinstance(v := getattr(module, k, None), int) and v > 0), 0)


def _dense(forward: Any, count: int) -> Any:
    def routing(self: Any, top_k_index: Any, top_k_weights: Any, width: int) -> tuple[Any, Any]:
        """Each expert's index tensor and the weights of `width` picks per token: the first at
        1, the others 0."""
        import torch

        index, weights = top_k_index[..., :width], top_k_weights[..., :width]
        if getattr(self, FIXED):  # constants of the traced shape (int() of a traced size)
            shape = tuple(int(d) for d in index.shape)
            alone = torch.zeros(shape, dtype=weights.dtype)
            alone[..., 0] = 1
            return [torch.full(shape, e, dtype=index.dtype) for e in range(count)], alone
        alone = torch.cat([torch.ones_like(weights[..., :1]), torch.zeros_like(weights[..., 1:])],
                          dim=-1)
        return [torch.full_like(index, e) for e in range(count)], alone

    def dense(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any,
              *args: Any, **kwargs: Any) -> Any:
        import torch

        if getattr(self, PICKS, None) is None:  # found on the first call
            setattr(self, PICKS, _picks_needed(self, forward, hidden_states, top_k_index,
                                               top_k_weights, args, kwargs))
        index, alone = routing(self, top_k_index, top_k_weights, getattr(self, PICKS))
        total, kind = None, None
        for expert in range(count):
            routed = forward(self, hidden_states, index[expert], alone, *args, **kwargs)
            kind = kind or torch.promote_types(routed.dtype, top_k_weights.dtype)
            picked = (top_k_index == expert).to(top_k_weights.dtype)
            weight = (top_k_weights * picked).sum(-1).to(kind)
            term = routed.to(kind) * weight.reshape(*routed.shape[:-1], 1)
            total = term if total is None else total + term
        return total.to(routed.dtype)

    return dense


def _picks_needed(self: Any, forward: Any, hidden_states: Any, top_k_index: Any,
                  top_k_weights: Any, args: tuple, kwargs: dict[str, Any]) -> int:
    """1 where the block's forward takes one pick per token (run eagerly once on these
    inputs), else the k it was given."""
    import torch

    k = int(top_k_index.shape[-1])
    if k == 1 or torch.jit.is_tracing():
        return k
    one = torch.zeros_like(top_k_index[..., :1])
    try:
        with torch.no_grad():
            forward(self, hidden_states, one, torch.ones_like(top_k_weights[..., :1]), *args,
                    **kwargs)
    except Exception:  # noqa: BLE001 - any failure: the block needs its k picks
        return k
    return 1
