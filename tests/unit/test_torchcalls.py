"""Calls the TorchScript tracer cannot take, replaced while tracing
(executors/runtime/torchcalls.py): a module making them exports inside `replaced()` and
computes in ONNX Runtime what it computes in torch without it."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from executors.runtime import torchcalls


def _run(module: torch.nn.Module, args: tuple) -> list[np.ndarray]:
    import onnxruntime as ort

    names = [f"x{i}" for i in range(len(args))]
    buf = io.BytesIO()
    with torchcalls.replaced():
        torch.onnx.export(module.eval(), args, buf, dynamo=False, opset_version=17,
                          input_names=names)
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    return session.run(None, {n: a.numpy() for n, a in zip(names, args)})


class _ComplexRotary(torch.nn.Module):
    """Rotary embeddings through complex numbers, as DeepSeek-V2's and Llama 4's are written."""

    def forward(self, q: torch.Tensor, positions: torch.Tensor) -> tuple:
        inv = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float) / 8))
        angles = positions[..., None].float() * inv
        freqs = torch.polar(torch.ones_like(angles), angles) * 0.5  # [b, s, 4]
        pairs = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))  # [b, h, s, 4]
        rotated = torch.view_as_real(pairs * freqs.unsqueeze(1).to(pairs.device)).flatten(3)
        # a complex tensor on the right of a number and of a real tensor, indexed, and joined
        scaled = torch.view_as_real(q[..., :4] * (2.0 * freqs[:, None, :, :] + pairs)).flatten(3)
        made = torch.complex(q[..., :4], q[..., 4:])
        joined = torch.view_as_real(torch.cat([made, pairs.conj()], dim=-1))
        return rotated.type_as(q), scaled, joined


def test_complex_rotary_exports_as_real_arithmetic_and_matches_torch() -> None:
    q, positions = torch.randn(1, 2, 5, 8), torch.arange(3, 8)[None]
    got = _run(_ComplexRotary(), (q, positions))
    for g, want in zip(got, _ComplexRotary()(q, positions), strict=True):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-5, atol=1e-5)


class _ComplexExp(torch.nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return torch.view_as_real(torch.exp(torch.view_as_complex(q.reshape(2, 2, 2))))


def test_an_operation_without_a_real_composition_is_refused_in_one_line() -> None:
    with pytest.raises(torchcalls.ComplexUnsupported) as info:
        _run(_ComplexExp(), (torch.randn(8),))
    assert str(info.value).splitlines() == [(
        "exp on a complex tensor has no composition of real operations for the TorchScript "
        "ONNX export; export=dynamo traces complex numbers its own way")]


class _BoolFills(torch.nn.Module):
    """Bool fill values, as the sparse-attention indexers write their masks."""

    def forward(self, scores: torch.Tensor, top: torch.Tensor) -> tuple:
        keep = scores.new_ones(scores.shape, dtype=torch.bool).scatter(-1, top, False)
        hidden = scores.masked_fill(scores > 1.0, value=True)  # cast to 1.0
        full = torch.full_like(keep, True).index_fill(0, top[0, :1], False)
        return keep, hidden, full, keep.new_full((2,), fill_value=False)


def test_bool_fill_values_trace_and_match_torch() -> None:
    scores, top = torch.randn(3, 6), torch.tensor([[0, 2], [1, 5], [4, 3]])
    got = _run(_BoolFills(), (scores, top))
    for g, want in zip(got, _BoolFills()(scores, top), strict=True):
        assert g.dtype == want.numpy().dtype
        np.testing.assert_array_equal(g, want.numpy())


class _InterleavedRotary(torch.nn.Module):
    """Helium's rotary embedding (GLM's and Cohere's are alike): tables repeated element by
    element, `rotate_half` stacking and flattening, the keys appended to a cache."""

    def forward(self, k: torch.Tensor, cos: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
        cos = cos.unsqueeze(1)
        cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
        x1, x2 = k[..., 0::2], k[..., 1::2]
        rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
        return torch.cat([past, k * cos + rotated * torch.repeat_interleave(cos, 1, dim=3)],
                         dim=-2)


def test_an_interleaved_rotary_table_exports_and_matches_torch() -> None:
    """The exporter's own repeat_interleave leaves its shape inference a rank too high, and the
    cache's cat stopped the export ("All tensors must have the same rank")."""
    args = (torch.randn(1, 2, 8, 32), torch.randn(1, 8, 32), torch.randn(1, 2, 4, 32))
    module = _InterleavedRotary()
    with pytest.raises(Exception, match="same rank"):
        torch.onnx.export(module.eval(), args, io.BytesIO(), dynamo=False, opset_version=17)
    (got,) = _run(module, args)
    np.testing.assert_allclose(got, module(*args).numpy(), rtol=1e-6, atol=1e-6)
    # other forms are left to the model: repeats given per element, or no dim (flattened)
    x = torch.arange(6.0).reshape(2, 3)
    with torchcalls.replaced():
        assert torch.equal(x.repeat_interleave(torch.tensor([1, 2]), dim=0),
                           torch.tensor([[0.0, 1, 2], [3, 4, 5], [3, 4, 5]]))
        assert torch.equal(x.repeat_interleave(2), torch.arange(6.0).repeat_interleave(2))
