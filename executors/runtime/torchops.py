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


def _expm1(g: Any, x: Any) -> Any:
    """exp(x) - 1 (xIELU's activation: Apertus)."""
    import torch

    exp = g.op("Exp", x)
    return g.op("Sub", exp, g.op("CastLike", g.op("Constant", value_t=torch.tensor(1.0)), exp))
