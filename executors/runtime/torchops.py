"""aten operators that models call and torch's TorchScript ONNX exporter does not write,
composed of ONNX operators, registered before an export (the exporter consults them only for
operators it has no symbolic of its own for)."""

from __future__ import annotations

from typing import Any

# the lowest opset each composition needs (CastLike: opset 15)
OPSET = 15


def register() -> None:
    """Register every composition below for the TorchScript exporter."""
    import torch

    torch.onnx.register_custom_op_symbolic("aten::expm1", _expm1, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::rms_norm", _rms_norm, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::copy", _copy, OPSET)


def _copy(g: Any, x: Any, src: Any, non_blocking: Any = None) -> Any:
    """x's values replaced by src's, broadcast to x's shape and cast to its type: what the
    exporter leaves of an in-place copy into a tensor made in the traced forward (a recurrent
    layer's state, zeros until transformers' cache copies the prompt's into it)."""
    return g.op("Expand", g.op("CastLike", src, x), g.op("Shape", x))


def _expm1(g: Any, x: Any) -> Any:
    """exp(x) - 1 (xIELU's activation: Apertus)."""
    import torch

    exp = g.op("Exp", x)
    return g.op("Sub", exp, g.op("CastLike", g.op("Constant", value_t=torch.tensor(1.0)), exp))


def _rms_norm(g: Any, x: Any, normalized_shape: Any, weight: Any, eps: Any) -> Any:
    """x / sqrt(mean(x^2) + eps) * weight over the last len(normalized_shape) axes
    (torch.nn.RMSNorm: DiffLlama's); eps, where None, is the float32 machine epsilon."""
    import torch
    from torch.onnx import symbolic_helper as sh

    axes = list(range(-len(sh._get_const(normalized_shape, "is", "normalized_shape")), 0))
    eps_value = torch.finfo(torch.float32).eps if sh._is_none(eps) else \
        sh._get_const(eps, "f", "eps")
    square = g.op("Mul", x, x)
    if g.opset >= 18:  # ReduceMean's axes became an input
        mean = g.op("ReduceMean", square, g.op("Constant", value_t=torch.tensor(axes)),
                    keepdims_i=1)
    else:
        mean = g.op("ReduceMean", square, axes_i=axes, keepdims_i=1)
    eps_t = g.op("CastLike", g.op("Constant", value_t=torch.tensor(eps_value)), x)
    out = g.op("Div", x, g.op("Sqrt", g.op("Add", mean, eps_t)))
    return out if sh._is_none(weight) else g.op("Mul", out, weight)
