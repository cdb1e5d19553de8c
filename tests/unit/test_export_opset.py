"""Export at the opset the model needs: an operator the configured opset cannot express is
exported at the lowest newer opset torch names, deterministically, and the opset checker takes
the raise export recorded (and nothing else)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from executors.onnx.artifacts import OPSET_RAISED_KEY, set_meta
from executors.run.checkers import Artifact, check
from executors.runtime.torch_onnx import Opset, export_graph
from planner.core.ops import FactName


def _folding():
    import torch

    class Folding(torch.nn.Module):
        """MobileViTV2's folding: F.fold with an output size read from a tensor's shape."""

        def forward(self, patches, like):
            return torch.nn.functional.fold(patches, output_size=like.shape[-2:],
                                            kernel_size=(2, 2), stride=(2, 2)) * 2.0

    return Folding().eval()


def _args():
    import torch

    return (torch.randn(1, 12, 16), torch.zeros(1, 3, 8, 8))


def test_fold_is_exported_at_the_opset_that_added_col2im(tmp_path: Path):
    import onnxruntime as ort
    import torch

    path = tmp_path / "fold.onnx"
    used = export_graph(_folding(), _args(), ["patches", "like"], ["out"], path, "torchscript", 17)
    assert used == Opset(18, "aten::col2im (added in opset 18)")
    model = onnx.load(str(path))
    assert model.opset_import[0].version == 18
    assert "Col2Im" in {n.op_type for n in model.graph.node}
    patches, like = _args()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {"patches": patches.numpy(), "like": like.numpy()}  # `like` is read for its shape
    got = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, _folding()(patches, like).numpy(), rtol=1e-6)
    again = tmp_path / "again.onnx"
    assert export_graph(_folding(), _args(), ["patches", "like"], ["out"], again, "torchscript",
                        17) == used
    assert onnx.load(str(again)).graph == model.graph


def test_a_model_the_opset_expresses_keeps_it(tmp_path: Path):
    import torch

    used = export_graph(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),), ["x"], ["y"],
                        tmp_path / "m.onnx", "torchscript", 17)
    assert used == Opset(17, "")


@pytest.mark.parametrize("record, holds", [
    ({"from": 17, "to": 18, "why": "aten::col2im (added in opset 18)"}, True),
    (None, False),
    ({"from": 16, "to": 18, "why": "another configuration's raise"}, False),
])
def test_the_opset_checker_takes_only_the_raise_export_recorded(tmp_path: Path, record, holds):
    import json

    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []),
                                   opset_imports=[onnx.helper.make_opsetid("", 18)])
    if record:
        set_meta(model, OPSET_RAISED_KEY, json.dumps(record))
    onnx.save(model, str(tmp_path / "model.onnx"))
    assert (check(Artifact(tmp_path), FactName.OPSET, 17) is None) is holds


class _IntegerMask:
    """CPM-Ant's mask: an int tensor or'ed with a bool one (ONNX's BitwiseOr: opset 18)."""

    @staticmethod
    def module():
        import torch

        class Mask(torch.nn.Module):
            def forward(self, context, causal):
                return (context[:, None, :] | causal[None]) * 3

        return Mask().eval()

    @staticmethod
    def args():
        import torch

        return (torch.randint(0, 3, (2, 4), dtype=torch.int32),
                torch.ones(4, 4, dtype=torch.bool).tril())


def test_bitwise_or_of_integers_is_exported_at_opset_18(tmp_path: Path):
    import onnxruntime as ort

    path = tmp_path / "mask.onnx"
    used = export_graph(_IntegerMask.module(), _IntegerMask.args(), ["context", "causal"],
                        ["mask"], path, "torchscript", 17)
    assert used == Opset(18, "aten::bitwise_or (added in opset 18)")
    context, causal = _IntegerMask.args()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"context": context.numpy(), "causal": causal.numpy()})[0]
    np.testing.assert_array_equal(got, _IntegerMask.module()(context, causal).numpy())


def test_a_value_no_schema_takes_is_one_line_naming_the_operator(tmp_path: Path):
    import torch

    from executors.runtime.torch_onnx import ExportFailed

    class AddsABool(torch.nn.Module):
        def forward(self, x):
            return x.int() + True  # a bool where aten::add takes a number

    with pytest.raises(ExportFailed) as info:
        export_graph(AddsABool().eval(), (torch.ones(3, dtype=torch.bool),), ["x"], ["y"],
                     tmp_path / "m.onnx", "torchscript", 17)
    assert str(info.value) == (
        "torch.onnx.export raised RuntimeError: the TorchScript tracer has no aten::add taking "
        "(Tensor, bool, int): the model passes a Python value of a type the operator's schema "
        "does not take")
