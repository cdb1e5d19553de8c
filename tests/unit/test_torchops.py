"""aten operators composed for the TorchScript exporter (executors/runtime/torchops.py): a
module calling them exports and computes in ONNX Runtime what it computes in torch."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch

from executors.runtime import torchops


@pytest.mark.parametrize("opset", [17, 20])  # ReduceMean's axes: an attribute, then an input
@pytest.mark.parametrize("norm", [
    torch.nn.RMSNorm([4, 8], eps=0.5),  # two axes, and an eps large enough to tell if dropped
    torch.nn.RMSNorm(8, elementwise_affine=False)])  # no weight, eps None
def test_rms_norm_exports_and_matches_torch(opset: int, norm: torch.nn.Module) -> None:
    import onnxruntime as ort

    torchops.register()
    if getattr(norm, "weight", None) is not None:
        torch.nn.init.normal_(norm.weight)
    x = torch.randn(2, 4, 8) * 3
    buf = io.BytesIO()
    torch.onnx.export(norm.eval(), (x,), buf, dynamo=False, opset_version=opset,
                      input_names=["x"])
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, norm(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_copy_into_a_tensor_the_forward_made_exports() -> None:
    """A recurrent layer's cache makes its state as zeros and copies the prompt's into it
    (transformers' LinearAttentionLayer): the trace leaves an out-of-place aten::copy."""
    import onnxruntime as ort

    class State(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            held = {0: torch.zeros_like(x[..., :2])}
            held[0].copy_(x[..., -2:].double())  # of another type: cast to the state's
            return held[0] + 1

    torchops.register()
    x = torch.randn(1, 3, 5)
    buf = io.BytesIO()
    torch.onnx.export(State(), (x,), buf, dynamo=False, opset_version=20, input_names=["x"])
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], x[..., -2:] + 1,
                               rtol=1e-6)


def test_a_permute_by_negative_dims_exports_as_a_valid_transpose(tmp_path: Any) -> None:
    """The state-space scan of Mamba-2's family permutes by (0, -2, -1, 1); TorchScript writes
    those dims as the Transpose's perm, which ONNX takes from zero up."""
    import onnxruntime as ort

    from executors.steps.export import export_graph

    class Scan(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.permute(0, -2, -1, 1) * 2

    x = torch.randn(1, 2, 3, 4)
    export_graph(Scan(), (x,), ["x"], ["y"], tmp_path / "model.onnx", "torchscript", 17, None)
    session = ort.InferenceSession(str(tmp_path / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"x": x.numpy()})[0],
                                  (x.permute(0, 2, 3, 1) * 2).numpy())
