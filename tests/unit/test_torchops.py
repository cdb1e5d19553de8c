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


def _run(module: torch.nn.Module, args: tuple, opset: int) -> list[np.ndarray]:
    """`module` exported at `opset` with the compositions registered, run in ONNX Runtime."""
    import onnxruntime as ort

    torchops.register()
    names = [f"x{i}" for i in range(len(args))]
    buf = io.BytesIO()
    torch.onnx.export(module.eval(), args, buf, dynamo=False, opset_version=opset,
                      input_names=names)
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    read = {i.name for i in session.get_inputs()}  # one the graph does not read is not one
    return session.run(None, {n: a.numpy() for n, a in zip(names, args) if n in read})


class _IndexAdd(torch.nn.Module):
    def forward(self, x: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> tuple:
        return x.index_add(0, index, source), x.index_add(-1, index[:3], source[:4, :3],
                                                          alpha=2.0)


@pytest.mark.parametrize("opset", [16, 20])
def test_index_add_adds_repeated_indices_as_torch(opset: int) -> None:
    x, source = torch.randn(4, 6), torch.randn(8, 6)
    index = torch.tensor([1, 1, 3, 1, 0, 3, 3, 2])  # more rows than x has, each index repeated
    got = _run(_IndexAdd(), (x, index, source), opset)
    for g, want in zip(got, _IndexAdd()(x, index, source), strict=True):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-6, atol=1e-6)


class _Bitwise(torch.nn.Module):
    def forward(self, ints: torch.Tensor, bools: torch.Tensor) -> tuple:
        mixed = ints[:, None, :] | (bools[:, :, None].logical_not() & bools[:, None, :])
        return mixed ^ ints[:, :, None], ints & 6, bools | bools.flip(-1)


def test_bitwise_operators_on_integers_and_bools_match_torch() -> None:
    ints = torch.randint(0, 16, (2, 5), dtype=torch.int32)
    bools = torch.rand(2, 5) > 0.5
    got = _run(_Bitwise(), (ints, bools), 18)
    for g, want in zip(got, _Bitwise()(ints, bools), strict=True):
        assert g.dtype == want.numpy().dtype
        np.testing.assert_array_equal(g, want.numpy())


def test_bitwise_operators_on_integers_ask_for_opset_18() -> None:
    # the export's opset loop reads this message and exports again at 18
    ints = torch.randint(0, 16, (2, 5), dtype=torch.int32)
    with pytest.raises(torch.onnx.errors.UnsupportedOperatorError, match="added in version 18"):
        _run(_Bitwise(), (ints, ints > 3), 17)


class _Cumsum(torch.nn.Module):
    def forward(self, mask: torch.Tensor, x: torch.Tensor) -> tuple:
        return mask.cumsum(-1), mask.int().cumsum(0), x.cumsum(1, dtype=torch.float64), \
            x.cumsum(dim=-1)


def test_cumsum_of_bools_and_integers_gives_torch_dtype_and_values() -> None:
    mask, x = torch.rand(3, 6) > 0.4, torch.randn(3, 6)
    got = _run(_Cumsum(), (mask, x), 17)
    for g, want in zip(got, _Cumsum()(mask, x), strict=True):
        assert g.dtype == want.numpy().dtype
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-6, atol=1e-6)


class _OverlappingChunks(torch.nn.Module):
    """[batch, seq, heads, dim] -> chunks of 4 rows overlapping by 2 per batch and head, as
    sliding-window attention makes them: as_strided on the view a reshape of a transpose gives
    (not contiguous when batch is 1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h, d = x.shape
        rows = x.transpose(1, 2).reshape(b * h, s, d).view(b * h, s // 4, 4, d)
        size, stride = list(rows.size()), list(rows.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
        return rows.as_strided(size=size, stride=stride) * 1.0


@pytest.mark.parametrize("shape", [(1, 16, 2, 4), (2, 16, 2, 4), (1, 16, 1, 1)])
def test_as_strided_reads_a_permuted_view_in_its_memory_order(shape: tuple) -> None:
    x = torch.randn(*shape)
    (got,) = _run(_OverlappingChunks(), (x,), 17)
    np.testing.assert_array_equal(got, _OverlappingChunks()(x).numpy())


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

    from executors.runtime.torch_onnx import export_graph

    class Scan(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.permute(0, -2, -1, 1) * 2

    x = torch.randn(1, 2, 3, 4)
    export_graph(Scan(), (x,), ["x"], ["y"], tmp_path / "model.onnx", "torchscript", 17, None)
    session = ort.InferenceSession(str(tmp_path / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"x": x.numpy()})[0],
                                  (x.permute(0, 2, 3, 1) * 2).numpy())


class _Solve(torch.nn.Module):
    def __init__(self, **how: Any) -> None:
        super().__init__()
        self.how = how

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.linalg.solve_triangular(a, b, **self.how)


def _delta_rule_system(n: int) -> torch.Tensor:
    """The unit lower triangular system of the chunked delta rule on correlated keys (L2-normed
    keys sharing a direction, beta near 1): off-diagonal entries near 0.9, where a product of
    powers of its strictly triangular part overflows and cancels in float32."""
    keys = torch.randn(2, 3, n, 128) + 3.0 * torch.randn(1, 1, 1, 128)
    keys = keys / keys.norm(dim=-1, keepdim=True)
    return torch.eye(n) + (0.99 * keys @ keys.transpose(-1, -2)).tril(-1)


@pytest.mark.parametrize("n", [1, 5, 64])  # 64: the chunked delta rule's chunk
@pytest.mark.parametrize("how", [
    {"upper": False, "unitriangular": True},  # Qwen3-Next's, Qwen3.5's, OLMo hybrid's
    {"upper": False}, {"upper": True}, {"upper": True, "unitriangular": True},
    {"upper": False, "left": False}])
@pytest.mark.parametrize("system", ["diagonal-heavy", "delta-rule"])
def test_a_triangular_solve_exports_and_matches_torch(n: int, how: dict[str, Any],
                                                      system: str) -> None:
    """X with A X = B (or X A = B) from A's inverse built by doubling blocks, which TorchScript's
    exporter has no symbolic for: as close to float64's answer as torch's own float32 solve."""
    torch.manual_seed(n)
    a = torch.randn(2, 3, n, n) * 0.3 + 2 * torch.eye(n) if system == "diagonal-heavy" \
        else _delta_rule_system(n)
    if how["upper"]:
        a = a.transpose(-1, -2).contiguous()
    b = torch.randn(2, 3, n, 7) if how.get("left", True) else torch.randn(2, 3, 7, n)
    module = _Solve(**how)
    (got,) = _run(module, (a, b), 17)
    exact = module(a.double(), b.double()).numpy()
    ours = np.abs(got - exact).max() / np.abs(exact).max()
    torchs = np.abs(module(a, b).numpy() - exact).max() / np.abs(exact).max()
    assert ours <= max(1e-6, 10 * torchs), (ours, torchs)


def test_a_triangular_solve_from_the_right_takes_operands_of_other_ranks() -> None:
    a = _delta_rule_system(16)[0, 0]  # one matrix for a batch of right-hand sides
    b = torch.randn(2, 3, 7, 16)
    module = _Solve(upper=False, left=False)
    (got,) = _run(module, (a, b), 17)
    np.testing.assert_allclose(got, module(a, b).numpy(), rtol=1e-4, atol=1e-5)
