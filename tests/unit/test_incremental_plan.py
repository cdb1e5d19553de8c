"""Incremental sweep planning (planner/support/memo.py): what jobs share is done once, and the
sweep plan is the one planning every job from scratch gives, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.core.storelayout import MANIFEST, entry_dir
from planner.errors import ConfigError
from planner.planning import plan_sweep
from planner.render import sweep as render_sweep
from planner.support import memo
from tests.unit.test_sweep_plan import VALUES

# Several groups, values that change the facts and so the rewrites (optim's fusions, the
# hierarchy's tag step, the target's legalize), one that only a step's params read (the
# sequence length), a contradiction (quant=none on HTP) and a value the schema refuses.
SWEEP = ["model=tiny_bert,minilm", "quant=none,w8a8,fp16", "target=cpu,qnn_htp",
         "optim=none,transformer", "export.hierarchy=true,false",
         "export.shapes.sequence_length=16,32", "verify.threshold=0.99,2"]


def both(overrides: list[str], store: Path) -> tuple[str, str, dict]:
    """The sweep plan as JSON text planned job by job, then incrementally; and the memo's
    tables of the incremental run."""
    fresh = json.dumps(plan_sweep(overrides, store=str(store), incremental=False).to_json())
    with memo.session() as tables:
        incremental = json.dumps(plan_sweep(overrides, store=str(store)).to_json())
    return fresh, incremental, tables


def test_incremental_sweep_plan_equals_the_per_job_plans(tmp_path: Path) -> None:
    first = plan_sweep(["model=tiny_bert", "quant=w8a8", "target=qnn_htp"], store=str(tmp_path))
    cached = first.jobs[0].plan.step("resolve").key  # one entry in the store: a cached step
    entry_dir(tmp_path, cached).mkdir(parents=True)
    (entry_dir(tmp_path, cached) / MANIFEST).write_text("{}")

    fresh, incremental, tables = both(SWEEP, tmp_path)
    assert incremental == fresh
    data = json.loads(incremental)
    assert render_sweep.render(data)
    jobs = data["jobs"]
    assert len(jobs) == 192
    errors = {j["error"] for j in jobs if j["error"]}
    assert any(e.startswith("verify.threshold: 2 is above the maximum 1") for e in errors)
    assert any(e.startswith("quant=none: compile for qnn_htp needs") for e in errors)
    assert data["summary"]["cached"] == 1 and data["summary"]["elided"] > 0
    planned = [j for j in jobs if j["plan"]]
    assert {len(j["plan"]["rewrites"]) for j in planned} != {0}
    # the shared work was done once: one rewrite search per distinct lowered plan (96 jobs
    # reach the rules, pairs that differ only in the sequence length, which no rule reads),
    # one source read per model, one check per distinct config section
    assert len(tables["rewrites"]) == 48
    assert len(tables["source"]) == 2
    assert len(tables["config-section"]) < 3 * len(jobs)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=4, unique=True).flatmap(
    lambda keys: st.tuples(*[st.lists(st.sampled_from(VALUES[k]), min_size=1, max_size=3,
                                      unique=True) for k in keys]).map(
        lambda vals: [f"{k}={','.join(v)}" for k, v in zip(keys, vals, strict=True)])))
def test_any_sweep_plans_the_same_incrementally(tmp_path: Path, overrides: list[str]) -> None:
    fresh, incremental, _ = both(overrides, tmp_path)
    assert incremental == fresh


def test_a_memo_computes_once_per_key_and_only_in_a_session() -> None:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert memo.remembered("k", 1, compute) == 1 and memo.remembered("k", 1, compute) == 2
    with memo.session():
        assert [memo.remembered("k", 1, compute) for _ in range(3)] == [3, 3, 3]
        assert memo.remembered("k", 2, compute) == 4
        assert memo.remembered("other", 1, compute) == 5
        with memo.session():  # nested: the same tables
            assert memo.remembered("k", 1, compute) == 3
    assert not memo.active()


def test_a_memoised_failure_is_raised_for_every_asker() -> None:
    calls: list[int] = []

    def fails() -> None:
        calls.append(1)
        raise ConfigError("model.path: no checkpoint there")

    with memo.session():
        for _ in range(3):
            with pytest.raises(ConfigError, match="no checkpoint there"):
                memo.remembered("source", "x", fails)
    assert calls == [1]


def test_frozen_content_keeps_json_types_apart() -> None:
    assert len({memo.frozen(v) for v in (1, 1.0, True, "1", [1], {"a": 1}, None)}) == 7
    shared = [1]
    assert memo.frozen({"a": shared, "b": shared}) == memo.frozen({"a": [1], "b": [1]})
    assert memo.frozen({"where": Path("/m")}) != memo.frozen({"where": Path("/n")})


@pytest.mark.parametrize("edit", [
    lambda c: c.update(extra={"a": 1}),                          # an unknown section
    lambda c: c.pop("perf"),                                      # a missing section
    lambda c: c["export"].update(opset="???"),                    # a value not set
    lambda c: c["export"].update(opset="17", hierarchy=3),        # two bad types, one section
    lambda c: c["verify"].update(threshold=2, samples=0),         # two bad values
    lambda c: c["model"].update(path="./m"),                      # a key the option ignores
    lambda c: c.update(store=None),                               # a section of the wrong type
])
def test_a_config_checked_by_section_gets_the_same_lines(edit) -> None:
    from planner.config.compose import compose
    from planner.config.validate import check_config

    def lines() -> list[str]:
        with pytest.raises(ConfigError) as err:
            check_config(config)
        return err.value.lines

    config = compose(["model=tiny_bert"])
    edit(config)
    fresh = lines()
    with memo.session():
        assert lines() == fresh
        assert lines() == fresh  # from the memo


@pytest.mark.parametrize("overrides", [
    ["model=tiny_bert"], ["model=minilm", "target=cpu", "quant=none"],
    ["model=tiny_random", "model.random_init.model_type=gpt2", "target=cpu", "quant=none"],
    ["model=tiny_random", "model.random_init.model_type=t5", "export.shapes.dynamic=false"],
    ["model=minilm", "eval=task"]])
def test_model_facts_read_only_the_sections_they_are_memoised_by(overrides) -> None:
    from planner.config.compose import compose
    from planner.core import lower

    config = compose(overrides)
    only = {k: config[k] for k in lower.READ_BY_FACTS}
    assert lower.build_facts(only) == lower.build_facts(config)


def test_a_config_digest_made_by_section_is_the_whole_configs() -> None:
    from planner.config.compose import compose
    from planner.core.keys import config_digest

    config = compose(["model=minilm", "export.shapes.sequence_length=77"])
    config["store"]["path"] = "/tmp/ü"  # non-ASCII text is hashed as itself
    with memo.session():
        by_section = config_digest(config)
    assert by_section == config_digest(config)


def test_a_sweep_over_a_user_config_dir_plans_the_same(tmp_path: Path) -> None:
    from planner.config.conftree import ConfigTree

    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    tiny = (Path(__file__).parents[2] / "conf" / "model" / "tiny_bert.yaml").read_text()
    (conf / "model" / "ours.yaml").write_text(tiny.replace("name: tiny_bert", "name: ours")
                                              .replace("seed: 0", "seed: 7"))
    (conf / "model" / "stray.yaml").write_text(tiny.replace("name: tiny_bert", "name: stray")
                                               .replace("seed: 0", "seed: abc"))
    tree = ConfigTree(user_dirs=(conf,))
    overrides = ["model=tiny_bert,ours,stray", "quant=w8a8,w8a16", "target=cpu,qnn_htp"]
    fresh = plan_sweep(overrides, store=str(tmp_path / "s"), tree=tree, incremental=False)
    incremental = plan_sweep(overrides, store=str(tmp_path / "s"), tree=tree)
    assert json.dumps(incremental.to_json()) == json.dumps(fresh.to_json())
    errors = {j.error for j in incremental.jobs if j.error}
    assert len(errors) == 1 and "stray.yaml" in errors.pop()  # the user's file is named
    assert len({j.plan.step("resolve").key for j in incremental.jobs if j.plan}) == 2


def test_a_jobs_config_stays_its_own_while_later_jobs_are_planned(tmp_path: Path) -> None:
    """Each job's config is its full compose, and stays so while later jobs are composed and
    planned from the same cached trees and memo."""
    from planner.config.compose import compose
    from planner.core.sweep import Composer, expand

    jobs = expand(["model=tiny_bert,minilm", "quant=w8a8,w8a16", "verify.threshold=0.9,0.95",
                   "export.shapes.sequence_length=16,32", "export.shapes={batch_size: 2}"])
    composer = Composer()
    configs = [composer(job) for job in jobs]
    planned = plan_sweep(["model=tiny_bert,minilm", "quant=w8a8,none",
                          "export.shapes.sequence_length=16,32"], store=str(tmp_path))
    assert all(j.plan for j in planned.jobs if "quant=none" not in j.overrides)
    for job, config in zip(jobs, configs, strict=True):
        assert config == compose(job)
    for job in planned.jobs:
        assert job.plan is None or job.plan.config == {
            **compose(job.overrides), "store": {"path": str(tmp_path.resolve())}}
