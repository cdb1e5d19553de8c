"""export.fallback: where the configured exporter itself fails on the fp32 copy (torch.onnx.export
raises, or its graph differs from torch), the model is exported with the fallback exporter
instead, at its lowest opset or the configured one if newer; the step's progress and metrics
say so. Any other failure (a model the graphs cannot carry) is not retried; a fallback that
fails too is one error naming both causes; `export.fallback=null` fails at the first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from executors.run.step_api import StepResult
from executors.steps import export
from planner.errors import StepError


class _Ctx:
    """What the export step reads of its context, and what it says."""

    def __init__(self, out: Path, fallback: str | None = "dynamo",
                 upcast: str | None = None) -> None:
        self.out, self.said, self.id, self.inputs = out, [], "encoder.export", {}
        self.step = {"op": "export"}
        self.params = {"exporter": "torchscript", "opset": 17, "fallback": fallback,
                       "upcast": upcast}

    def progress(self, line: str) -> None:
        self.said.append(line)

    def fail(self, cause: str, fix: str, where: str | None = None) -> StepError:
        return StepError(f"step {self.id} (export) failed on {where or 'src'}: {cause}; {fix}")


def attempts(monkeypatch: pytest.MonkeyPatch,
             outcome: dict[tuple[str, str], Exception | None]) -> list[tuple[str, str]]:
    """export._run replaced: each (dtype, exporter) raises its exception or succeeds,
    leaving a half-written file first."""
    tried: list[tuple[str, str]] = []

    def attempt(ctx: _Ctx, dtype: str, exporter: str) -> StepResult:
        assert not list(ctx.out.iterdir())  # what an earlier attempt left is gone
        tried.append((dtype, exporter))
        (ctx.out / "model.onnx").write_bytes(b"x")
        exc = outcome.get((dtype, exporter))
        if exc is not None:
            raise exc
        return StepResult(metrics={"nodes": 3})

    monkeypatch.setattr(export, "_run", attempt)
    return tried


def fault(ctx: _Ctx, cause: str) -> export.ExporterFault:
    return export.ExporterFault.of(ctx, cause, "/s/model.onnx")


def test_an_exporter_that_raises_falls_back_to_dynamo(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _Ctx(tmp_path)
    cause = "torch.onnx.export raised RuntimeError: unordered_map::at"
    tried = attempts(monkeypatch, {("float32", "torchscript"): fault(ctx, cause)})
    result = export.run(ctx)
    assert tried == [("float32", "torchscript"), ("float32", "dynamo")]
    assert result.metrics == {"nodes": 3, "exporter_used": "dynamo", "exporter_why": cause}
    said = f"  torchscript cannot export it ({cause}); exporting with dynamo (export.fallback)"
    assert ctx.said == [said]


def test_a_narrow_trace_then_the_fp32_copy_then_the_fallback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _Ctx(tmp_path, upcast="bfloat16")
    tried = attempts(monkeypatch, {
        ("bfloat16", "torchscript"): RuntimeError("not implemented for 'BFloat16'"),
        ("float32", "torchscript"): fault(ctx, "ONNX Runtime's logits differs from torch")})
    assert export.run(ctx).metrics["exporter_used"] == "dynamo"
    assert tried == [("bfloat16", "torchscript"), ("float32", "torchscript"),
                     ("float32", "dynamo")]


def test_a_failure_that_is_not_the_exporters_is_not_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _Ctx(tmp_path)
    refused = ctx.fail("XCache keeps more than keys and values", "not supported")
    tried = attempts(monkeypatch, {("float32", "torchscript"): refused})
    with pytest.raises(StepError) as info:
        export.run(ctx)
    assert info.value is refused and tried == [("float32", "torchscript")]


@pytest.mark.parametrize("fallback", [None, "torchscript"])
def test_no_fallback_fails_at_the_first_exporter(tmp_path: Path, fallback: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _Ctx(tmp_path, fallback=fallback)
    first = fault(ctx, "torch.onnx.export raised RuntimeError: boom")
    tried = attempts(monkeypatch, {("float32", "torchscript"): first})
    with pytest.raises(export.ExporterFault) as info:
        export.run(ctx)
    assert info.value is first and tried == [("float32", "torchscript")]
    assert "try another exporter" in str(info.value)


def test_both_exporters_failing_is_one_error_naming_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _Ctx(tmp_path)
    attempts(monkeypatch, {("float32", "torchscript"): fault(ctx, "raised A"),
                           ("float32", "dynamo"): fault(ctx, "raised B")})
    with pytest.raises(StepError) as info:
        export.run(ctx)
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert "torchscript: raised A; dynamo (export.fallback): raised B" in message
    assert "try another exporter" not in message  # both were tried


def test_dynamo_leaves_the_free_axes_free_under_their_labels(tmp_path: Path) -> None:
    """A graph with a free past (as a causal LM's decode graph on the CPU) exported by dynamo:
    torch.export's dynamic shapes for the module's `forward(*args)`, the symbols renamed to
    the axes' labels; the graph runs at other lengths."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    from executors.runtime.torch_onnx import export_graph

    class Decode(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            new, past = args
            return torch.cat([past, new], dim=1) * 2.0

    axes = {"new": {1: "sequence_length"}, "past": {1: "past_sequence_length"},
            "present": {1: "total_sequence_length"}}
    path = tmp_path / "model.onnx"
    export_graph(Decode().eval(), (torch.randn(1, 3, 4), torch.randn(1, 5, 4)),
                 ["new", "past"], ["present"], path, "dynamo", 18, axes)
    graph = onnx.load(str(path)).graph
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*graph.input, *graph.output]}
    assert shapes == {"new": [1, "sequence_length", 4], "past": [1, "past_sequence_length", 4],
                      "present": [1, "total_sequence_length", 4]}
    new, past = np.ones((1, 1, 4), np.float32), np.zeros((1, 7, 4), np.float32)
    (got,) = ort.InferenceSession(str(path)).run(None, {"new": new, "past": past})
    assert got.shape == (1, 8, 4) and got[0, -1].tolist() == [2.0] * 4


def test_dynamos_failure_is_said_by_its_cause_without_colours(tmp_path: Path) -> None:
    """torch.onnx's dynamo error opens with boilerplate in ANSI colours ("Failed to export
    the model with torch.export. This is step 1/3 ..."): the line kept is torch.export's."""
    import torch

    from executors.runtime.torch_onnx import ExportFailed, export_graph

    class Branches(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 2 if bool(x.sum() > 0) else x - 1  # on a value: torch.export refuses

    with pytest.raises(ExportFailed) as info:
        export_graph(Branches().eval(), (torch.randn(3),), ["x"], ["y"],
                     tmp_path / "model.onnx", "dynamo", 18)
    said = str(info.value)
    assert said.startswith("torch.onnx.export raised ") and "\x1b" not in said
    assert "Failed to export the model with torch.export" not in said and len(said) > 40


def test_the_first_attempts_model_is_freed_before_the_fallback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first exporter's failure is kept as its words only: its frames (the fp32 model
    they hold) are gone before the fallback loads its own."""
    import gc
    import weakref

    class Model:
        pass

    held: list[weakref.ref] = []
    alive: list[bool] = []
    ctx = _Ctx(tmp_path)

    def attempt(ctx: _Ctx, dtype: str, exporter: str) -> StepResult:
        if exporter == "torchscript":
            model = Model()
            held.append(weakref.ref(model))
            raise fault(ctx, "raised A")
        gc.collect()
        alive.append(held[0]() is not None)
        return StepResult(metrics={})

    monkeypatch.setattr(export, "_run", attempt)
    export.run(ctx)
    assert alive == [False]


def test_a_fallback_that_fails_otherwise_still_names_both_causes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _Ctx(tmp_path)
    attempts(monkeypatch, {("float32", "torchscript"): fault(ctx, "raised A"),
                           ("float32", "dynamo"): ValueError("inputs_embeds cannot be None")})
    with pytest.raises(StepError, match=r"torchscript: raised A; dynamo \(export.fallback\): "
                                        r"inputs_embeds cannot be None"):
        export.run(ctx)
