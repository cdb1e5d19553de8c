"""verify's fp32 reference (executors/steps/verify.py): a graph whose trace kept what its
example's values decided (a split sized by the tokens that picked an expert, DBRX's) fails in
ONNX Runtime on other inputs; that is one line saying so, suggesting no quant."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from executors.steps.verify import reference_run
from planner.errors import StepError


def test_a_graph_that_fails_on_other_values_is_one_line(tmp_path: Path) -> None:
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import helper as h

    # the positions of the positive values, split as the example's two of them were
    graph = h.make_graph(
        [h.make_node("Greater", ["x", "zero"], ["positive"]),
         h.make_node("NonZero", ["positive"], ["at"]),
         h.make_node("Split", ["at", "sizes"], ["first", "second"], axis=1)],
        "traced", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
        [h.make_tensor_value_info(n, T.INT64, None) for n in ("first", "second")],
        [h.make_tensor("zero", T.FLOAT, [], [0.0]), h.make_tensor("sizes", T.INT64, [2], [1, 1])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ctx = SimpleNamespace(fail=lambda cause, fix, where=None: StepError(f"{where}: {cause}; {fix}"))
    names = ["first", "second"]
    example = {"x": np.array([[1, -1, 1, -1]], np.float32)}
    assert [a.ravel().tolist() for a in reference_run(ctx, session, names, example, tmp_path)] \
        == [[0, 0], [0, 2]]
    other = {"x": np.array([[1, 1, 1, -1]], np.float32)}
    with pytest.raises(StepError, match=r"fails in ONNX Runtime on verify's inputs \(.*Split.*"
                                        r"no quant setting mends this") as got:
        reference_run(ctx, session, names, other, tmp_path)
    assert len(str(got.value).splitlines()) == 1 and "quant=" not in str(got.value)
