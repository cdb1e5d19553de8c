"""Property: random overrides, hostile ones included (very long strings, control characters,
interpolations, NaN/inf, negative and huge numbers, Hydra syntax), never make `modelplan plan`
end in a traceback or an exit status other than 0 or 2. The CLI runs in this process (its
`main`) so that a few hundred examples take seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from planner.config.compose import GROUPS, group_options
from planner.config.validate import known_paths
from tests.unit.test_hostile_data import exit_status

# store.path gets its own cases below: anywhere else a plan would write its digest memo there
KEYS = sorted(p for p in known_paths() if not p.startswith("store")) + [
    "hydra.job.name", "hydra.run.dir", "nosuch", "model.nosuch.deeper"]
NASTY = ["x" * 5000, "${oops}", "${model.name}", "${oc.env:HOME}", "${oc.env:NOPE_NOT_SET}",
         "${", "${}", "nan", "NaN", "inf", "-inf", "1e400", "-1", "-0.0", "0",
         str(10**30), str(-10**30), "null", "~", "", "[", "[1,2", "{a: 1}", "{", "'", '"', "\\",
         "a,b", "???", "\x00", "\x1b[31m", "\n", "\t", "true", "[]", "{}", "[${x}]",
         "choice(a,b)", "range(1,5)", "glob(*)", "interval(0,1)", "/", "/etc/passwd", "..",
         "'" + "y" * 300 + "'", "é" * 200, "\u202e"]
values = st.one_of(st.sampled_from(NASTY), st.text(max_size=30),
                   st.integers(-10**30, 10**30).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr))
choices = st.sampled_from(GROUPS).flatmap(
    lambda g: st.sampled_from(group_options(g)).map(lambda o: f"{g}={o}"))
sourced = st.builds(lambda model, key, value: [f"model={model}", f"model.{key}={value}"],
                    st.sampled_from(["local_hf", "onnx_file", "hub_cache"]),
                    st.sampled_from(["path", "hub_id"]), values)
overrides = st.lists(st.one_of(
    choices, sourced,
    st.builds("{}={}".format, st.sampled_from(KEYS + list(GROUPS)), values),
    st.builds("{}{}={}".format, st.sampled_from(["+", "++", "~"]), st.sampled_from(KEYS), values),
    values,
), max_size=5)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-stores")


def plan_exit_status(argv: list[str], capsys: pytest.CaptureFixture[str]) -> int:
    return exit_status(argv, capsys)[0]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ovs=overrides)
@example(ovs=[["model=local_hf", "model.path=" + "x" * 5000]])
@example(ovs=[["model=hub_cache", "model.hub_id=" + "a" * 5000]])
def test_hostile_overrides_exit_0_or_2_without_a_traceback(
        ovs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    flat = [o for ov in ovs for o in ([ov] if isinstance(ov, str) else ov)]
    assert plan_exit_status(["plan", "--format", "json", "model=tiny_bert", *flat], capsys) \
        in (0, 2), flat


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=values)
def test_hostile_store_paths_exit_0_or_2_without_a_traceback(
        name: str, stores: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["plan", "model=tiny_bert", f"store.path={stores}/{name}"],
                 ["plan", "model=tiny_bert", "--store", f"{stores}/{name}"]):
        assert plan_exit_status(argv, capsys) in (0, 2), argv
