"""aten operators composed for the TorchScript exporter (executors/runtime/torchops.py): a
module calling them exports and computes in ONNX Runtime what it computes in torch."""

from __future__ import annotations

import io

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
