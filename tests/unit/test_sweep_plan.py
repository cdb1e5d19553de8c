"""Sweep planning: expansion, one compose per group selection (equal to a full compose),
and the merged DAG (sweep-CSE) with each key once."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.config.compose import compose
from planner.core.sweep import Composer, expand
from planner.errors import ConfigError
from planner.planning import plan_sweep
from tests.conftest import run_cli

VALUES = {
    "quant": ["none", "w8a8", "w8a16", "w8a16_pc", "fp16"], "target": ["cpu", "qnn_htp"],
    "optim": ["none", "transformer"], "model": ["tiny_bert", "minilm"],
    "export.opset": ["14", "17", "18"], "export.shapes.sequence_length": ["16", "64", "128"],
    "quant.per_channel": ["true", "false"], "verify.threshold": ["0.9", "0.99"],
    "model.random_init.seed": ["0", "1"], "optim.flags": ["[gelu]", "[]"],
}


def test_expand_is_the_cartesian_product_in_order() -> None:
    assert expand(["model=tiny_bert", "quant=w8a8,w8a16", "target=cpu,qnn_htp"]) == [
        ["model=tiny_bert", "quant=w8a8", "target=cpu"],
        ["model=tiny_bert", "quant=w8a8", "target=qnn_htp"],
        ["model=tiny_bert", "quant=w8a16", "target=cpu"],
        ["model=tiny_bert", "quant=w8a16", "target=qnn_htp"]]
    assert len(expand(["export.shapes.sequence_length=range(16,20)"])) == 4


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=4, unique=True).flatmap(
    lambda keys: st.tuples(*[st.sampled_from(VALUES[k]) for k in keys]).map(
        lambda vals: [f"{k}={v}" for k, v in zip(keys, vals, strict=True)])))
def test_fast_compose_equals_full_compose(overrides: list[str]) -> None:
    def outcome(fn):
        try:
            return fn(overrides)
        except ConfigError:
            return "ConfigError"

    assert outcome(Composer()) == outcome(compose)


def test_composer_runs_hydra_once_for_plain_group_files() -> None:
    composer = Composer()
    for job in expand(["model=tiny_bert", "quant=w8a8,w8a16", "export.opset=14,15,16,17"]):
        composer(job)
    assert composer.composes == 1  # the base; plain group files are swapped in
    assert len(composer.cache) == 3  # base + two group selections


def test_merged_plan_has_each_key_once_and_shares_the_prefix(tmp_path: Path) -> None:
    # fixed shapes on both targets: the export is the same graph (on cpu it is free by default)
    sweep = plan_sweep(["model=tiny_bert", "quant=w8a8,w8a16", "target=cpu,qnn_htp",
                        "export.shapes.dynamic=false"], store=str(tmp_path))
    data = sweep.to_json()
    keys = [s["key"] for s in data["steps"]]
    assert [s["key"] for s in data["steps"]] == list(sweep.unique)
    assert len(keys) == len(set(keys))
    by_id = {s["id"]: s for s in data["steps"] if len(s["jobs"]) == 4}
    assert set(by_id) == {"resolve", "export", "normalize", "optimize"}
    assert data["summary"]["total_steps"] == 38 and data["summary"]["unique_steps"] == 24
    merges = [rw for rw in data["rewrites"] if rw["rule"] == "sweep-CSE"]
    assert {rw["step"] for rw in merges} >= {"export", "legalize"}
    assert all(rw["action"] == "merge" and rw["premises"] for rw in merges)


def test_cpu_and_htp_share_one_export_of_text_by_default(tmp_path: Path) -> None:
    """The text graph is exported with free axes once; HTP fixes them in a step of its own."""
    sweep = plan_sweep(["model=tiny_bert", "quant=w8a16", "target=cpu,qnn_htp"],
                       store=str(tmp_path))
    steps = {j.overrides[-1]: {s["id"]: s for s in j.ir["steps"]} for j in sweep.jobs}
    cpu, htp = steps["target=cpu"], steps["target=qnn_htp"]
    assert cpu["export"]["params"]["dynamic"] is True
    assert cpu["export"]["key"] == htp["export"]["key"]
    assert "fix_shapes" not in cpu
    fixed = htp["fix_shapes"]
    assert fixed["inputs"] == {"model": "export"}
    assert [i["shape"] for i in fixed["params"]["inputs"]] == [[1, 128]] * 3
    assert htp["normalize"]["inputs"] == {"model": "fix_shapes"}
    exports = [v for v in sweep.unique.values() if v["step"]["op"] == "export"]
    assert len(exports) == 1 and exports[0]["jobs"] == [0, 1]
    # asked for fixed shapes, each target exports them directly: no step fixes them
    direct = plan_sweep(["model=tiny_bert", "quant=w8a16", "target=qnn_htp",
                         "export.shapes.dynamic=false"], store=str(tmp_path)).jobs[0].ir["steps"]
    assert "fix_shapes" not in {s["id"] for s in direct}


def test_a_step_one_job_elides_and_another_runs_is_run(tmp_path: Path) -> None:
    # optim=transformer absorbs normalize (optimize reads the export); optim=none reads it
    sweep = plan_sweep(["model=tiny_bert", "optim=transformer,none", "quant=none",
                        "target=cpu"], store=str(tmp_path))
    normalize = next(v for v in sweep.unique.values() if v["step"]["id"] == "normalize")
    assert normalize["jobs"] == [0, 1] and normalize["step"]["action"] == "run"
    elided = next(s for s in sweep.jobs[0].ir["steps"] if s["id"] == "normalize")
    assert elided["action"] == "elided"


def test_a_bad_job_fails_alone(tmp_path: Path) -> None:
    data = plan_sweep(["model=tiny_bert", "quant=none,w8a8", "target=qnn_htp"],
                      store=str(tmp_path)).to_json()
    assert [j["error"] is None for j in data["jobs"]] == [False, True]
    assert "quant=none" in data["jobs"][0]["error"]


def test_plan_m_cli_text_and_json(tmp_path: Path) -> None:
    result = run_cli("plan", "-m", "model=tiny_bert", "quant=w8a8,w8a16", "target=cpu,qnn_htp",
                     "export.shapes.dynamic=false", "--store", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Shared steps" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith(
        "Sweep plan: 4 jobs, 38 steps, 24 unique")
    # a step shared by consecutive jobs names them as a range, one line per step
    shared = {line.split()[0]: line.split("jobs ", 1)[1] for line in
              result.stdout.split("Shared steps", 1)[1].splitlines()[1:] if "jobs " in line}
    assert shared["resolve"] == shared["export"] == "0-3"


def test_job_spans() -> None:
    from planner.render.sweep import spans

    assert spans([3]) == "3" and spans([1, 0]) == "0, 1"
    assert spans([0, 1, 2, 3, 5, 7, 8, 9, 12]) == "0-3, 5, 7-9, 12"


def test_ready_steps_start_longest_remaining_path_first(tmp_path: Path) -> None:
    from executors.run import stepdag

    sweep = plan_sweep(["model=tiny_bert", "quant=w8a16", "target=cpu,qnn_htp"],
                       store=str(tmp_path))
    unique = sweep.unique
    ids = {j.index: {s["id"]: s["key"] for s in j.ir["steps"]} for j in sweep.jobs}
    deps = stepdag.dependencies(unique, ids)
    first = stepdag.longest_path_first(unique, deps)
    builds = [k for k, v in unique.items()
              if v["step"]["action"] == "run" and not stepdag.measures(v["step"])]
    for key in builds:  # a step comes before everything it feeds
        for consumer, inputs in deps.items():
            if key in inputs.values() and consumer in builds:
                assert first(key) < first(consumer)
    by_op: dict[str, list[str]] = {}
    for key in builds:
        by_op.setdefault(unique[key]["step"]["op"], []).append(key)
    # after normalize, the HTP chain (legalize, quantize, tag, compile, verify) is longer
    # than the CPU one (legalize, quantize, tag, verify): its first step starts first
    legalize = {unique[k]["step"]["params"]["target"]: k for k in by_op["legalize"]}
    assert first(legalize["qnn_htp"]) < first(legalize["cpu"])
