"""Each rule: a case where it fires and one where it must not."""

from __future__ import annotations

import pytest

from planner import rules
from planner.core.plan import Step
from planner.errors import PlanError
from planner.rules import (
    absorbed_elision,
    dead_step,
    idempotent_elision,
    metadata_order,
    reject,
    target_legalize,
)
from tests.unit.helpers import append_after, lowered

SWITCHES = {"elide": True}


def fixed_point(*overrides: str):
    plan = lowered("model=tiny_bert", *overrides)
    rules.rewrite(plan, plan.config["planner"]["rules"])
    return plan


# -- idempotent-elision -------------------------------------------------------------------
def test_elision_fires_for_empty_optimize_after_normalize() -> None:
    (rw,) = idempotent_elision.apply(lowered("model=tiny_bert", "optim=none"))
    assert (rw.action, rw.step) == ("elide", "optimize")
    assert {p["fact"]: p["by"] for p in rw.premises} == {"normalized": "normalize", "fused": "normalize"}


def test_elision_does_not_fire_when_fusions_are_asked_for() -> None:
    assert idempotent_elision.apply(lowered("model=tiny_bert", "optim=transformer")) == []


def test_elision_fires_for_a_second_normalize() -> None:
    plan = lowered("model=tiny_bert", "optim=transformer")
    append_after(plan, "optimize", Step("normalize.2", "normalize", {}))
    (rw,) = idempotent_elision.apply(plan)
    assert rw.step == "normalize.2"


def test_elision_of_optimize_subset_but_not_superset() -> None:
    plan = lowered("model=tiny_bert", "optim.flags=[gelu,layer_norm]")
    append_after(plan, "optimize", Step("optimize.2", "optimize", {"flags": ["gelu"]}))
    (rw,) = idempotent_elision.apply(plan)
    assert rw.step == "optimize.2"
    plan = lowered("model=tiny_bert", "optim.flags=[gelu]")
    append_after(plan, "optimize", Step("optimize.2", "optimize", {"flags": ["attention", "gelu"]}))
    assert idempotent_elision.apply(plan) == []


def test_elision_switch_turns_it_off() -> None:
    plan = fixed_point("planner.rules.elide=false")
    assert all(s.action != "elided" for s in plan.steps)


# -- absorbed-elision ---------------------------------------------------------------------
def test_absorbed_elision_drops_normalize_before_fusions() -> None:
    plan = fixed_point("optim=transformer", "quant=none", "target=cpu")
    assert plan.step("normalize").action == "elided"
    assert plan.step("normalize").proof["rule"] == "absorbed-elision"
    assert {p["fact"]: p["by"] for p in plan.step("normalize").proof["premises"]} == {
        "normalized": "optimize", "fused": "optimize"}
    assert plan.step("optimize").inputs["model"] == "export"
    assert plan.step("tag").inputs["model"] == "optimize"


def test_absorbed_elision_keeps_normalize_when_a_reader_does_not_normalize() -> None:
    plan = fixed_point("quant=none", "target=cpu")  # optimize{} elided: tag reads normalize
    assert plan.step("normalize").action == "run"
    assert absorbed_elision.apply(plan) == []


def test_absorbed_elision_keeps_the_deliverable() -> None:
    plan = lowered("model=tiny_bert", "optim=transformer", "quant=none", "target=cpu",
                   "export.hierarchy=false")
    plan.deliverable = "normalize"
    assert absorbed_elision.apply(plan) == []


def test_absorbed_elision_switch_turns_it_off() -> None:
    plan = fixed_point("optim=transformer", "planner.rules.elide=false")
    assert plan.step("normalize").action == "run"
    assert plan.step("optimize").inputs["model"] == "normalize"


# -- metadata-order -----------------------------------------------------------------------
def test_metadata_order_moves_tag_after_the_last_metadata_dropper() -> None:
    (rw,) = metadata_order.apply(lowered("model=tiny_bert"))
    assert (rw.action, rw.step, rw.anchor) == ("reorder", "tag", "quantize")
    plan = fixed_point()
    assert plan.step("tag").inputs == {"model": "quantize", "hierarchy": "export"}
    assert plan.step("compile").inputs["model"] == "tag"


def test_metadata_order_without_quantization_tags_after_normalize() -> None:
    plan = fixed_point("quant=none", "target=cpu")
    assert plan.step("tag").inputs["model"] == "normalize"
    assert plan.deliverable == "tag"


def test_metadata_order_does_not_fire_when_tag_is_last() -> None:
    assert metadata_order.apply(fixed_point()) == []


# -- target-legalize ----------------------------------------------------------------------
def test_target_legalize_inserts_before_quantize_for_qnn_htp() -> None:
    (rw,) = target_legalize.apply(lowered("model=tiny_bert", "target=qnn_htp", "quant=w8a8"))
    assert (rw.action, rw.anchor) == ("insert", "optimize")
    assert rw.new_step.params == {"target": "qnn_htp"}
    plan = fixed_point("target=qnn_htp", "quant=w8a8")
    assert plan.step("quantize").inputs["model"] == "legalize"
    assert plan.step("legalize").inputs["model"] == "normalize"


def test_target_legalize_does_not_fire_for_an_unquantized_cpu_build() -> None:
    assert target_legalize.apply(lowered("model=tiny_bert", "target=cpu", "quant=none")) == []


def test_a_quantized_cpu_build_is_legalized_before_quantize() -> None:
    """Mask sentinels ruin any QDQ range: the CPU's legalizer floors them (MiniLM w8a16_pc
    on the CPU EP: cosine 0.62 without, 0.999 with)."""
    (rw,) = target_legalize.apply(lowered("model=tiny_bert", "target=cpu", "quant=w8a8"))
    assert rw.action == "insert" and rw.new_step.params == {"target": "cpu"}
    plan = fixed_point("model=tiny_bert", "target=cpu", "quant=w8a8")
    ops = [s.op for s in plan.live()]
    assert ops.index("legalize") < ops.index("quantize")


def test_target_legalize_does_not_fire_twice() -> None:
    assert target_legalize.apply(fixed_point("target=qnn_htp")) == []


# -- dead-step ----------------------------------------------------------------------------
def test_dead_step_drops_an_unconsumed_step() -> None:
    plan = lowered("model=tiny_bert", "target=cpu", "quant=none")
    orphan = Step("normalize.2", "normalize", {}, {"model": "export"})
    plan.steps.insert(plan.steps.index(plan.step("export")) + 1, orphan)
    (rw,) = dead_step.apply(plan)
    assert (rw.action, rw.step) == ("drop", "normalize.2")


def test_dead_step_keeps_everything_sinks_need() -> None:
    assert dead_step.apply(fixed_point()) == []


# -- reject -------------------------------------------------------------------------------
def test_reject_qnn_htp_without_quantization_names_the_config_and_a_fix() -> None:
    plan = lowered("model=tiny_bert", "target=qnn_htp", "quant=none")
    (rw,) = reject.apply(plan)
    assert rw.action == "reject"
    assert rw.conclusion.startswith("quant=none: compile")
    assert "set quant=w8a16_pc (or quant=fp16), or target=cpu" in rw.conclusion
    with pytest.raises(PlanError):
        fixed_point("target=qnn_htp", "quant=none")


def test_reject_accepts_fp16_for_qnn_htp() -> None:
    assert reject.apply(fixed_point("target=qnn_htp", "quant=fp16")) == []


def test_rules_are_discovered_in_order() -> None:
    assert [r.NAME for r in rules.discover()] == [
        "idempotent-elision", "metadata-order", "absorbed-elision", "target-legalize",
        "dead-step", "reject"]


def test_unmet_requires_is_read_by_input_role() -> None:
    from planner.core import facts as F
    from planner.core.ops import OPS

    verify = OPS["verify"]
    onnx = {"format": F.Fact("onnx", "export")}
    assert F.unmet_requires(verify, {}, {"candidate": onnx, "reference": onnx}) == []
    unmet = F.unmet_requires(verify, {}, {"candidate": onnx})  # no reference input: no facts
    assert [(r.fact, r.role) for r in unmet] == [("format", "reference")]
    assert [r.fact for r in F.unmet_requires(OPS["quantize"], {"profile": "cpu"},
                                             {"model": onnx})] == ["normalized", "legal_for"]
