"""A TorchScript export's weights held back from the exporter and stored one at a time
(executors/runtime/torch_initializers.py) give the graph the exporter writes itself: the same
nodes, inputs, initializer names, order, dtypes and bytes, bf16 and tied weights included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from executors.runtime import torch_initializers
from executors.store import weights


class Tied(torch.nn.Module):
    """An embedding read again by the head (tied), a layer in bf16 and a transposed weight
    the exporter constant-folds into a new tensor."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(300, 64)
        self.inner = torch.nn.Linear(64, 128)
        self.low = torch.nn.Linear(128, 64).to(torch.bfloat16)
        self.head = torch.nn.Linear(64, 300, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.inner(self.embed(ids)))
        x = self.low(x.to(torch.bfloat16)).float()
        return self.head(x) + x.sum(-1, keepdim=True) @ self.inner.weight[:1, :1]


def _export(path: Path) -> None:
    torch.onnx.export(Tied().eval(), (torch.tensor([[1, 2, 3, 4]]),), str(path),
                      input_names=["ids"], output_names=["logits"], opset_version=17,
                      dynamo=False, do_constant_folding=True, external_data=True)


def _tensors(model: onnx.ModelProto, base: Path) -> list[tuple[str, int, list[int], bytes]]:
    out = []
    for t in model.graph.initializer:
        data = t.raw_data
        if t.data_location == weights.EXTERNAL:
            path, offset = weights.data_file(t, base)
            length = int({e.key: e.value for e in t.external_data}["length"])
            with path.open("rb") as fh:
                fh.seek(offset)
                data = fh.read(length)
        out.append((t.name, t.data_type, list(t.dims), data))
    return out


@pytest.mark.filterwarnings("ignore")
def test_held_back_export_is_the_exporters_graph(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "held").mkdir()
    _export(tmp_path / "plain" / "model.onnx")
    with torch_initializers.held_back() as held:
        _export(tmp_path / "held" / "model.onnx")
    assert held, "the exporter wrote the weights itself"
    written = onnx.load(str(tmp_path / "held" / "model.onnx"), load_external_data=False)
    assert not written.graph.initializer  # nothing serialized by torch
    assert {i.name for i in written.graph.input} > {"ids"}  # the weights, as inputs for now
    held_count = len(held)
    torch_initializers.store(written, held, tmp_path / "held")
    assert not held
    plain = onnx.load(str(tmp_path / "plain" / "model.onnx"), load_external_data=False)
    assert [n.SerializeToString() for n in written.graph.node] == \
        [n.SerializeToString() for n in plain.graph.node]
    assert [i.name for i in written.graph.input] == [i.name for i in plain.graph.input] == ["ids"]
    got, want = _tensors(written, tmp_path / "held"), _tensors(plain, tmp_path / "plain")
    assert len(got) == held_count
    assert got == want
    inline = [(t.name, t.SerializeToString()) for t in written.graph.initializer
              if t.data_location != weights.EXTERNAL]
    assert inline == [(t.name, t.SerializeToString()) for t in plain.graph.initializer
                      if t.data_location != weights.EXTERNAL and t.name in dict(inline)]
    bf16 = [t for t in written.graph.initializer if t.data_type == onnx.TensorProto.BFLOAT16]
    assert bf16, "the bf16 layer's weights kept their dtype"
    tied = [t for t in written.graph.initializer if list(t.dims) == [300, 64]]
    assert len(tied) == 1  # the tied table once
    assert tied[0].data_location == weights.EXTERNAL  # 75 KB: a blob
    table = np.frombuffer(_tensors(written, tmp_path / "held")[
        [t.name for t in written.graph.initializer].index(tied[0].name)][3], np.float32)
    np.testing.assert_array_equal(table.reshape(300, 64), Tied().embed.weight.detach().numpy())


def test_the_exporter_is_restored_after_the_block() -> None:
    before = torch._C._jit_pass_onnx_deduplicate_initializers
    with pytest.raises(RuntimeError), torch_initializers.held_back():
        raise RuntimeError("export failed")
    assert torch._C._jit_pass_onnx_deduplicate_initializers is before
