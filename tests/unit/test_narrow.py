"""A 16-bit checkpoint exported as saved (executors/runtime/narrow.py): traced in bf16 or fp16,
then widened to the fp32 graph an fp32 copy exports, its weights written as fp32 one at a
time. Checked against the fp32 export of the same weights, and the export step's way back to an
fp32 copy when the narrow trace fails."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from executors.runtime import narrow
from executors.runtime.torch_onnx import export_graph
from executors.steps import export


class Block(torch.nn.Module):
    """What a decoder layer does with its dtype: an RMSNorm computed in fp32 and cast back, a
    constant made in the input's dtype, a softmax asked for in fp32."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.Parameter(torch.rand(16) + 0.5)
        self.proj = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = self.norm * h.to(dtype)
        scores = self.proj(h) + torch.full((1,), 0.5, dtype=dtype)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)
        return self.head(probs * h)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_narrow_trace_widens_to_the_fp32_export(tmp_path: Path, dtype: torch.dtype) -> None:
    x = torch.randn(1, 4, 16, generator=torch.Generator().manual_seed(1))
    narrow_model = Block().to(dtype).eval()
    wide_model = Block().to(dtype).float().eval()  # the same 16-bit weights, upcast
    kind = narrow.dtype_of(narrow_model)
    assert kind == (TensorProto.BFLOAT16 if dtype == torch.bfloat16 else TensorProto.FLOAT16)
    (tmp_path / "n").mkdir()
    (tmp_path / "w").mkdir()
    export_graph(narrow_model, narrow.cast((x,), kind), ["x"], ["y"], tmp_path / "n/m.onnx",
                 "torchscript", 17, narrow_type=kind)
    export_graph(wide_model, (x,), ["x"], ["y"], tmp_path / "w/m.onnx", "torchscript", 17)
    got, want = onnx.load(tmp_path / "n/m.onnx"), onnx.load(tmp_path / "w/m.onnx")
    assert not _narrow_anywhere(got, kind)
    assert Counter(n.op_type for n in got.graph.node) - Counter(
        n.op_type for n in want.graph.node) == Counter()  # no node the fp32 export lacks
    assert not [n for n in got.graph.node if n.op_type == "Cast"]  # fp32 to fp32: gone
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in got.graph.initializer}
    assert all(w.dtype == np.float32 for w in weights.values())
    upcast = {t.name: onnx.numpy_helper.to_array(t) for t in want.graph.initializer}
    assert sorted(a.tobytes() for a in weights.values() if a.size > 1) == \
        sorted(a.tobytes() for a in upcast.values() if a.size > 1)  # the same fp32 weights
    feed = {"x": x.numpy()}
    y = ort.InferenceSession(str(tmp_path / "n/m.onnx")).run(None, feed)[0]
    with torch.no_grad():
        reference = wide_model(x).numpy()
    np.testing.assert_allclose(y, reference, atol=1e-5)


def _narrow_anywhere(model: onnx.ModelProto, kind: int) -> list[str]:
    graph = model.graph
    found = [v.name for v in [*graph.input, *graph.output, *graph.value_info]
             if v.type.tensor_type.elem_type == kind]
    found += [t.name for t in graph.initializer if t.data_type == kind]
    for node in graph.node:
        for a in node.attribute:
            if (a.name == "to" and a.i == kind) or (a.type == a.TENSOR and a.t.data_type == kind):
                found.append(node.name)
    return found


def test_widen_reaches_constants_casts_and_subgraphs() -> None:
    bf16 = TensorProto.BFLOAT16
    half = helper.make_tensor("c", bf16, [2], [1.0, 2.0])
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=helper.make_tensor(
            "k", bf16, [2], [3.0, 3.0]))],
        "then", [], [helper.make_tensor_value_info("k", bf16, [2])])
    other = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["k2"], to=bf16)], "else", [],
        [helper.make_tensor_value_info("k2", bf16, [2])])
    graph = helper.make_graph([
        helper.make_node("Cast", ["x"], ["xn"], to=bf16),
        helper.make_node("Cast", ["xn"], ["xw"], to=TensorProto.FLOAT),  # an identity once wide
        helper.make_node("Mul", ["xw", "c"], ["m"]),
        helper.make_node("If", ["flag"], ["picked"], then_branch=branch, else_branch=other),
        helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT),  # a graph output: stays
    ], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
             helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("picked", bf16, [2])], [half])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert narrow.widen(model, bf16) == 2  # x -> xn and xn -> xw: both fp32 to fp32 now
    assert not _narrow_anywhere(model, bf16)
    assert [n.op_type for n in model.graph.node] == ["Mul", "If", "Cast"]
    assert model.graph.node[0].input[0] == "x"
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(model.graph.initializer[0]),
                                  [1.0, 2.0])
    then = next(a.g for a in model.graph.node[1].attribute if a.name == "then_branch")
    assert onnx.numpy_helper.to_array(then.node[0].attribute[0].t).tolist() == [3.0, 3.0]
    onnx.checker.check_model(model)
    x = np.array([1.5, -2.0], np.float32)
    y, picked = ort.InferenceSession(model.SerializeToString()).run(
        None, {"x": x, "flag": np.array(True)})
    np.testing.assert_array_equal(y, x * [1.0, 2.0])
    assert picked.dtype == np.float32 and picked.tolist() == [3.0, 3.0]


class _Ctx:
    """What the export step reads of its context, and what it says."""

    def __init__(self, out: Path, exporter: str = "torchscript") -> None:
        self.out, self.said, self.id = out, [], "prefill.export"
        self.params = {"upcast": "bfloat16", "exporter": exporter}

    def progress(self, line: str) -> None:
        self.said.append(line)


@pytest.mark.parametrize(("raised", "said"), [
    ("\"addmm_impl_cpu_\" not implemented for 'BFloat16'\nmore",
     "\"addmm_impl_cpu_\" not implemented for 'BFloat16'"),
    (("step prefill.export (export) failed on /s/x/model.onnx: ONNX Runtime's logits differs "
      "from torch by 0.2 (tolerance 0.001: 0.001 of its peak 1); try another exporter"),
     "ONNX Runtime's logits differs from torch by 0.2 (tolerance 0.001: 0.001 of its peak 1)"),
])
def test_a_failed_narrow_trace_exports_an_fp32_copy(tmp_path: Path, raised: str, said: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    tried = []

    def attempt(ctx: _Ctx, dtype: str, exporter: str) -> str:
        tried.append(dtype)
        if dtype == "bfloat16":
            (ctx.out / "half-written.onnx").write_bytes(b"x")
            (ctx.out / "weights").mkdir()
            raise RuntimeError(raised)
        assert not list(ctx.out.iterdir())  # the narrow attempt's files are gone
        return "fp32 export"

    monkeypatch.setattr(export, "_run", attempt)
    ctx = _Ctx(tmp_path)
    assert export.run(ctx) == "fp32 export"
    assert tried == ["bfloat16", "float32"]
    assert ctx.said == [f"  traced in bfloat16: {said}; exporting an fp32 copy"]
    dynamo = _Ctx(tmp_path, "dynamo")  # dynamo exports from an fp32 copy, as before
    tried.clear()
    assert export.run(dynamo) == "fp32 export" and tried == ["float32"]
