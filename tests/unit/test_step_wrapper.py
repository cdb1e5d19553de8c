"""The step wrapper and the fact checkers on small real ONNX graphs: requires are checked
before a step runs, ensures are observed on its output (a step that breaks its declaration
fails naming the fact and the node), and only observed facts are stamped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.artifacts import FACTS_KEY, MODEL, SIDECAR, model_meta, save
from executors.run import wrapper
from executors.run.checkers import Artifact, check, observed_precision
from executors.run.step_api import StepContext, StepResult
from executors.run.wrapper import apply_step
from planner.core.ops import FactName
from planner.errors import EnsuresError, RequiresError, StepError


def tiny_model(extra_nodes: list[onnx.NodeProto] = (), inits: list = (),
               output: str = "y") -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="/model/relu/Relu"),
             *extra_nodes]
    if not extra_nodes:
        nodes.append(helper.make_node("Identity", ["r"], [output], name="/model/out/Identity"))
    graph = helper.make_graph(nodes, "g", [x], [y], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def stamped_dir(path: Path, model: onnx.ModelProto, facts: dict[str, Any]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    meta = {"facts": {k: {"value": v, "by": "earlier"} for k, v in facts.items()},
            "step": "earlier", "key": "0" * 64}
    model.metadata_props.add(key=FACTS_KEY, value=json.dumps(meta))
    save(model, path / MODEL)
    return path


def ctx_for(op: str, params: dict[str, Any], inputs: dict[str, Path], out: Path) -> StepContext:
    out.mkdir(parents=True, exist_ok=True)
    step = {"id": op, "op": op, "params": params, "inputs": {r: r for r in inputs},
            "key": "f" * 64, "action": "run"}
    return StepContext(step, inputs, out, progress=lambda _m: None)


def test_a_step_that_breaks_its_ensures_fails_naming_the_fact_and_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = stamped_dir(tmp_path / "in", tiny_model(), {"format": "onnx", "hierarchy_map": True})
    (src / SIDECAR).write_text(json.dumps({"nodes": {}, "prefix": "model", "scopes": {},
                                           "root": "/M"}))

    def lazy_tag(ctx: StepContext) -> StepResult:  # claims to tag, writes no tags
        save(onnx.load(str(ctx.input_model())), ctx.out / MODEL)
        return StepResult()

    monkeypatch.setattr(wrapper, "implementation", lambda _name: lazy_tag)
    ctx = ctx_for("tag", {}, {"model": src, "hierarchy": src}, tmp_path / "out")
    with pytest.raises(EnsuresError) as err:  # a postcondition; still a StepError
        apply_step(ctx)
    assert isinstance(err.value, StepError)
    assert "does not satisfy tagged" in str(err.value)
    assert "'/model/relu/Relu' (Relu) has no hierarchy tag" in str(err.value)


def test_requires_are_checked_on_the_input_before_the_step_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = stamped_dir(tmp_path / "in", tiny_model(), {"format": "onnx"})  # not normalized
    monkeypatch.setattr(wrapper, "implementation",
                        lambda _name: pytest.fail("the step must not run"))
    ctx = ctx_for("quantize", {"profile": "cpu"}, {"model": src, "source": src},
                  tmp_path / "out")
    with pytest.raises(RequiresError, match="its model input does not have normalized"):
        apply_step(ctx)


def test_only_observed_facts_are_stamped(tmp_path: Path) -> None:
    src = stamped_dir(tmp_path / "in", tiny_model(), {"format": "onnx", "opset": 17})
    ctx = ctx_for("normalize", {}, {"model": src}, tmp_path / "out")
    apply_step(ctx)
    stamp = json.loads(model_meta(onnx.load(str(ctx.out / MODEL)))[FACTS_KEY])
    assert stamp["facts"]["normalized"] == {"value": True, "by": "normalize"}
    assert stamp["facts"]["opset"] == {"value": 17, "by": "earlier"}  # carried, re-observed
    assert stamp["key"] == "f" * 64
    # the Identity the export left is gone: one more basic pass changes nothing
    assert check(Artifact(ctx.out), FactName.NORMALIZED, True) is None
    assert check(Artifact(src), FactName.NORMALIZED, True) is not None


def test_a_carried_fact_the_output_lost_fails_the_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = stamped_dir(tmp_path / "in", tiny_model(), {"format": "onnx", "opset": 17})

    def bump_opset(ctx: StepContext) -> StepResult:  # legalize is declared to keep the opset
        model = onnx.load(str(ctx.input_model()))
        model.opset_import[0].version = 18
        save(model, ctx.out / MODEL)
        return StepResult()

    monkeypatch.setattr(wrapper, "implementation", lambda _name: bump_opset)
    ctx = ctx_for("legalize", {"target": "qnn_htp"}, {"model": src}, tmp_path / "out")
    with pytest.raises(EnsuresError, match="no longer has opset .its default-domain opset is 18"):
        apply_step(ctx)


def _qdq_matmul(weight_type: int, act_type: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 4), np.uint8 if weight_type == TensorProto.UINT8
                                        else np.uint16), "w_q")
    inits = [w, numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             helper.make_tensor("wz", weight_type, [], [0]),
             helper.make_tensor("az", act_type, [], [0])]
    nodes = [helper.make_node("QuantizeLinear", ["r", "s", "az"], ["rq"], name="q"),
             helper.make_node("DequantizeLinear", ["rq", "s", "az"], ["rd"], name="dq"),
             helper.make_node("DequantizeLinear", ["w_q", "s", "wz"], ["w"], name="wdq"),
             helper.make_node("MatMul", ["rd", "w"], ["y"], name="mm")]
    return tiny_model(nodes, inits)


def test_precision_is_observed_from_the_qdq_nodes() -> None:
    assert observed_precision(_qdq_matmul(TensorProto.UINT8, TensorProto.UINT16)) == "w8a16"
    assert observed_precision(_qdq_matmul(TensorProto.UINT8, TensorProto.UINT8)) == "w8a8"
    assert observed_precision(tiny_model()) == "fp32"


def test_legal_for_names_what_htp_rejects(tmp_path: Path) -> None:
    mask = numpy_helper.from_array(np.full((1, 4), np.finfo(np.float32).min, np.float32), "m")
    nodes = [helper.make_node("Erf", ["r"], ["e"], name="/model/act/Erf"),
             helper.make_node("Add", ["e", "m"], ["y"], name="/model/add/Add")]
    path = stamped_dir(tmp_path / "m", tiny_model(nodes, [mask]), {})
    why = check(Artifact(path), FactName.LEGAL_FOR, "qnn_htp")
    assert why is not None and "Erf node '/model/act/Erf'" in why and "+1 more" in why
    # the CPU runs Erf; a mask sentinel is what it cannot quantize
    assert check(Artifact(path), FactName.LEGAL_FOR, "cpu") == \
        "mask constant 'm' at or below -1e+30"


def test_fused_set_checks_each_flag(tmp_path: Path) -> None:
    path = stamped_dir(tmp_path / "m", tiny_model(), {})
    assert check(Artifact(path), FactName.FUSED, []) is None
    assert check(Artifact(path), FactName.FUSED, ["gelu"]) is None  # no GELU left to fuse
