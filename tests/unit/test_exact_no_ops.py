"""The dynamo export keeps a norm's small epsilon: onnxscript's optimizer took `variance + 1e-8`
for an Add of zero and dropped it, so a bf16 Helium's padding rows (zero embeddings) became
inf and every generated token NaN; inside the export its no-op rules match exact zeros and
ones only, and they still remove those."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest


class _Norm:
    """Helium's RMSNorm, as transformers writes it (its checkpoints' eps is 1e-8)."""

    @staticmethod
    def module(eps: float):
        import torch

        class RMSNorm(torch.nn.Module):
            def forward(self, x):
                variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
                return x * torch.rsqrt(variance + eps)

        return RMSNorm().eval()


def _ops(path: Path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def test_a_norms_epsilon_of_1e_8_survives_the_dynamo_export(tmp_path: Path) -> None:
    import onnxruntime as ort
    import torch

    from executors.runtime.torch_onnx import export_graph

    path = tmp_path / "norm.onnx"
    export_graph(_Norm.module(1e-8), (torch.randn(1, 4, 8),), ["x"], ["y"], path, "dynamo", 18)
    assert "Add" in _ops(path)
    x = np.zeros((1, 4, 8), np.float32)
    x[0, :2] = np.random.default_rng(0).standard_normal((2, 8))  # two tokens, two zero rows
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert np.isfinite(got).all()
    want = _Norm.module(1e-8)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_exact_zeros_and_ones_are_still_removed_and_the_rules_restored(tmp_path: Path) -> None:
    import torch
    from onnxscript import rewriter

    from executors.runtime.torch_onnx import export_graph

    class NoOps(torch.nn.Module):
        def forward(self, x):
            return torch.relu((x * 1.0 + 0.0 - 0.0) / 1.0)

    before = rewriter._DEFAULT_REWRITE_RULES
    path = tmp_path / "noops.onnx"
    export_graph(NoOps().eval(), (torch.randn(2, 3),), ["x"], ["y"], path, "dynamo", 18)
    assert _ops(path) == ["Relu"]
    assert rewriter._DEFAULT_REWRITE_RULES is before  # outside the export, as onnxscript has it
    from executors.runtime import exact_no_ops

    with pytest.raises(RuntimeError), exact_no_ops.exact():  # an export that fails inside
        assert rewriter._DEFAULT_REWRITE_RULES is not before
        raise RuntimeError("the export failed")
    assert rewriter._DEFAULT_REWRITE_RULES is before
