"""Mixed precision by module (quant.overrides, quant.search): checked at plan time with one line
per mistake, in the quantize step's params only when set (every other plan keeps its keys), and
the rules' node selection on a hand-made graph."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from executors.onnx import mixed_precision as mp
from planner.errors import ConfigError
from planner.planning import plan_from_overrides
from tests.conftest import run_cli

BASE_PARAMS = {"kind", "weight_type", "activation_type", "per_channel", "symmetric",
               "calibration", "profile"}
ATTENTION = "quant.overrides=[{modules: [BertSelfAttention], activation_type: uint16}]"


def quantize_step(tmp_path: Path, *overrides: str) -> object:
    plan = plan_from_overrides(["model=tiny_bert", "quant=w8a8", "target=cpu", *overrides],
                               store=str(tmp_path))
    return plan.step("quantize")


def test_without_overrides_the_quantize_step_is_what_it_was(tmp_path: Path) -> None:
    step = quantize_step(tmp_path, "quant.overrides=[]", "quant.search=none")
    assert set(step.params) == BASE_PARAMS
    assert set(step.inputs) == {"model", "source"}


def test_overrides_are_in_the_key_and_read_the_hierarchy(tmp_path: Path) -> None:
    plain = quantize_step(tmp_path)
    mixed = quantize_step(tmp_path, ATTENTION)
    assert mixed.params["overrides"] == [{"activation_type": "uint16",
                                          "modules": ["BertSelfAttention"]}]
    assert mixed.inputs["hierarchy"] == "export"
    by_op = quantize_step(tmp_path, "quant.overrides=[{op_types: [Softmax], precision: float}]")
    assert "hierarchy" not in by_op.inputs  # an op-type rule needs no module names
    assert len({plain.key, mixed.key, by_op.key}) == 3


def test_search_auto_carries_its_gate(tmp_path: Path) -> None:
    step = quantize_step(tmp_path, "quant.search=auto", "verify.threshold=0.995")
    assert step.params["search"] == {"metric": "cosine", "threshold": 0.995, "samples": 4}
    assert step.inputs["hierarchy"] == "export"


@pytest.mark.parametrize(("override", "needle"), [
    ("quant.overrides=[{modules: [X], bits: 16}]",
     ("quant.overrides.0.bits: unknown key; allowed here: activation_type, except_op_types, "
     "modules, nodes, op_types, precision, weight_type")),
    ("quant.overrides=[{modules: [X], activation_type: int4}]",
     "quant.overrides.0.activation_type: 'int4' is not one of uint8, uint16, int8, int16"),
    ("quant.overrides=[{activation_type: uint16}]", "quant.overrides.0: selects no node"),
    ("quant.overrides=[{modules: [X]}]", "quant.overrides.0: sets nothing"),
    ("quant.overrides=[{modules: [X], precision: float, weight_type: uint16}]",
     "quant.overrides.0: precision: float keeps the nodes unquantized"),
    ("quant.overrides=[{modules: []}]", "quant.overrides.0.modules: needs at least 1 item"),
])
def test_a_bad_rule_is_one_clear_line(tmp_path: Path, override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        quantize_step(tmp_path, override)
    assert needle in str(err.value)


def test_float_nodes_on_qnn_htp_compile_with_its_fp16_options(tmp_path: Path) -> None:
    def compile_options(*overrides: str) -> dict[str, object]:
        plan = plan_from_overrides(["model=tiny_bert", "quant=w8a8", "target=qnn_htp",
                                    *overrides], store=str(tmp_path))
        return plan.step("compile").params["provider_options"]

    assert "enable_htp_fp16_precision" not in compile_options(ATTENTION)
    floated = compile_options("quant.overrides=[{op_types: [Softmax], precision: float}]")
    assert floated["enable_htp_fp16_precision"] == 1 and floated["soc_model"] == 60


def test_search_without_a_gate_and_types_under_fp16_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="verify=none sets none; set verify=cosine"):
        quantize_step(tmp_path, "quant.search=auto", "verify=none")
    with pytest.raises(ConfigError, match="quant=fp16 has no integer types"):
        plan_from_overrides(["model=tiny_bert", "quant=fp16", "target=cpu",
                             "quant.overrides=[{op_types: [Softmax], activation_type: uint16}]"],
                            store=str(tmp_path))
    with pytest.raises(ConfigError, match="quant.search is set but quant=none"):
        plan_from_overrides(["model=tiny_bert", "quant=none", "target=cpu", "quant.search=auto"],
                            store=str(tmp_path))


def test_plan_text_shows_the_rules(tmp_path: Path) -> None:
    result = run_cli("plan", "model=tiny_bert", "quant=w8a8", "target=cpu", ATTENTION,
                     "--store", str(tmp_path))
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if " quantize " in x)
    assert "overrides=[{activation_type: uint16, modules: [BertSelfAttention]}]" in line
    assert "hierarchy<-export" in result.stdout


def graph() -> onnx.GraphProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="q"),
             helper.make_node("Softmax", ["a"], ["b"], name="s"),
             helper.make_node("MatMul", ["b", "w"], ["c"], name="o"),
             helper.make_node("Softmax", ["c"], ["y"], name="s2")]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in ("x", "y")]
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1.0, 0.0, 0.0, 1.0])
    return helper.make_graph(nodes, "g", io[:1], io[1:], [w])


TAGS = ["/M/Attn.0", "/M/Attn.0", "/M/Out", "/M/Out"]


def test_rules_intersect_selectors_and_later_rules_win() -> None:
    g = graph()
    assert mp.select({"modules": ["Attn"], "op_types": ["Softmax"]}, g, TAGS) == ["s"]
    assert mp.select({"modules": ["/M/Out"]}, g, TAGS) == ["o", "s2"]
    assert mp.select({"nodes": ["q", "o"], "op_types": ["MatMul"]}, g, TAGS) == ["q", "o"]
    found = mp.decide([{"modules": ["M"], "activation_type": "uint16"},
                       {"op_types": ["Softmax"], "precision": "float"},
                       {"nodes": ["s2"], "weight_type": "uint16"}], g, TAGS)
    assert found.nodes == {"q": {"activation_type": "uint16"}, "s": {"precision": "float"},
                           "o": {"activation_type": "uint16"}, "s2": {"weight_type": "uint16"}}
    assert found.float_nodes() == ["s"] and found.selected == [4, 2, 1]


def test_a_rule_that_selects_nothing_names_it_and_the_known_modules() -> None:
    with pytest.raises(mp.SelectionError, match=r"quant.overrides.1 modules=\['Attention'\] "
                       r"selects no node of this graph \(module classes: Attn, M, Out;"):
        mp.decide([{"op_types": ["Softmax"], "precision": "float"},
                   {"modules": ["Attention"], "activation_type": "uint16"}], graph(), TAGS)


def test_overrides_set_outputs_and_weights_not_biases() -> None:
    g = graph()
    model = helper.make_model(g)
    found = mp.decide([{"nodes": ["q"], "activation_type": "uint16", "weight_type": "int16"}],
                      g, TAGS)
    assert mp.tensor_overrides(found, model, {"uint16": "U16", "int16": "I16"}) == {
        "a": [{"quant_type": "U16"}], "w": [{"quant_type": "I16"}]}


def test_the_search_ladder_goes_activations_weights_float() -> None:
    from executors.steps.quant_search import _next

    cpu = {"activation_type": "uint8", "weight_type": "int8", "profile": "cpu"}
    rungs, now = [], None
    while (now := _next("/M/A", now, cpu)) is not None:
        rungs.append(now)
    assert rungs == [{"modules": ["/M/A"], "activation_type": "uint16"},
                     {"modules": ["/M/A"], "activation_type": "uint16", "weight_type": "int16"},
                     {"modules": ["/M/A"], "precision": "float"}]
    htp = {**cpu, "activation_type": "uint16", "profile": "qnn_htp"}  # no 16-bit weights
    assert _next("/M/A", None, htp) == {"modules": ["/M/A"], "precision": "float"}
    # 4-bit weights go to 8 bits on every target, then as 8-bit weights do
    w4 = {**htp, "weight_type": "int4"}
    assert _next("/M/A", None, w4) == {"modules": ["/M/A"], "weight_type": "uint8"}
    assert _next("/M/A", {"modules": ["/M/A"], "weight_type": "uint8"}, w4) == {
        "modules": ["/M/A"], "precision": "float"}


def test_plan_shows_the_search_and_its_gate(tmp_path: Path) -> None:
    result = run_cli("plan", "model=tiny_bert", "quant=w8a8", "target=qnn_htp",
                     "quant.search=auto", "--store", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    quantize = next(x for x in lines if " quantize " in x)
    # the target's margin: the CPU proxy must clear 0.995 for verify on HTP to clear 0.99
    assert quantize.endswith("search={metric: cosine, threshold: 0.99, samples: 4, margin: "
                             "0.005}")
    compile_ = next(x for x in lines if " compile " in x)
    assert "enable_htp_fp16_precision: 1" in compile_  # the search may keep a module float
    on_cpu = run_cli("plan", "model=tiny_bert", "quant=w8a8", "target=cpu", "quant.search=auto",
                     "--store", str(tmp_path))
    assert on_cpu.returncode == 0, on_cpu.stderr
    assert "search={metric: cosine, threshold: 0.99, samples: 4}" in on_cpu.stdout
