"""User config trees: a team's own conf/ on top of the packaged groups (--config-dir,
hydra.searchpath, --config-name, +experiment), validated by the schema, errors that name
the file and the dotted path, and the sweep composer equal to Hydra with a user tree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.config.compose import compose
from planner.config.conftree import from_cli
from planner.core.sweep import Composer
from planner.errors import ConfigError
from tests.conftest import ROOT, run_cli
from tests.teamconf import write_team_conf


@pytest.fixture(scope="module")
def conf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_team_conf(tmp_path_factory.mktemp("team"))


def config_json(*args: str, cwd: Path | None = None) -> dict:
    result = run_cli("config", "--json", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_new_option_extends_a_packaged_one(conf: Path) -> None:
    by_dir = config_json("--config-dir", str(conf), "model=our_model")
    by_searchpath = config_json(f"hydra.searchpath=[file://{conf}]", "model=our_model")
    assert by_dir == by_searchpath
    assert by_dir["model"]["name"] == "our_model"
    assert by_dir["model"]["random_init"]["config"]["hidden_size"] == 32  # the one change
    assert by_dir["model"]["random_init"]["config"]["num_hidden_layers"] == 2  # tiny_bert


def test_experiment_files_and_primary_configs(conf: Path) -> None:
    exp = config_json("--config-dir", str(conf), "model=tiny_bert", "+experiment=int8_cpu")
    assert (exp["quant"]["name"], exp["target"]["name"], exp["export"]["opset"]) == \
        ("w8a8", "cpu", 18)
    ours = config_json("--config-dir", str(conf), "--config-name", "ours")
    assert (ours["model"]["name"], ours["target"]["name"]) == ("our_model", "cpu")
    assert ours["export"]["shapes"]["sequence_length"] == 64
    assert ours["quant"]["name"] == "w8a16_pc"  # the rest is the packaged config


def test_plan_with_a_user_option(conf: Path, tmp_path: Path) -> None:
    result = run_cli("plan", "--config-dir", str(conf), "model=our_model", "quant=our_int8",
                     "target=cpu", "--store", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "model=our_model" in result.stdout and "quant=our_int8" in result.stdout
    assert "symmetric=true" in result.stdout


def one_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("modelplan: error: "), result.stderr
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


def test_errors_name_the_file_and_the_dotted_path(tmp_path: Path) -> None:
    write_team_conf(tmp_path, {
        "model/bad.yaml": "defaults:\n  - tiny_bert\n  - _self_\nname: bad\n"
                          "random_init:\n  seed: abc\n",
        "quant/broken.yaml": "name: broken\nkind: [qdq\n",
        "quant/typo.yaml": "defaults:\n  - w8a8\n  - _self_\nname: typo\nper_chanel: true\n"})
    one_error(run_cli("plan", "--config-dir", "conf", "model=bad", cwd=tmp_path),
              "conf/model/bad.yaml: model.random_init.seed: 'abc' is not an integer")
    one_error(run_cli("plan", "--config-dir", "conf", "quant=typo", cwd=tmp_path),
              "conf/quant/typo.yaml: quant.per_chanel: unknown key (did you mean "
              "'quant.per_channel'?)")
    one_error(run_cli("config", "--config-dir", "conf", "quant=broken", cwd=tmp_path),
              "conf/quant/broken.yaml:3:1: not valid YAML")
    # an override sets the value: the override is what to fix, not a file
    line = one_error(run_cli("config", "--config-dir", "conf", "model=bad",
                             "model.random_init.seed=x", cwd=tmp_path))
    assert line == "modelplan: error: model.random_init.seed: 'x' is not an integer"


def test_tree_mistakes_are_one_clear_line(conf: Path, tmp_path: Path) -> None:
    one_error(run_cli("plan", "--config-dir", str(conf), "model=our_modle"),
              "model: 'our_modle' is not one of", "our_model", "did you mean 'our_model'")
    one_error(run_cli("plan", "--config-dir", str(conf), "+experiment=int8"),
              "experiment: 'int8' is not one of int8_cpu")
    one_error(run_cli("plan", "--config-dir", str(conf), "--config-name", "our"),
              "--config-name our: there is no our.yaml", "did you mean 'ours'")
    one_error(run_cli("plan", "--config-dir", str(tmp_path / "nope")), "not a directory")
    one_error(run_cli("plan", "hydra.searchpath=file:///x"), "hydra.searchpath is a list")
    one_error(run_cli("plan", "hydra.searchpath=[pkg://nope.conf]"), "no such installed package")
    shadow = write_team_conf(tmp_path, {"quant/w8a8.yaml": "name: w8a8\n",
                                        "config.yaml": "defaults: [config]\n"})
    result = run_cli("plan", "--config-dir", str(shadow))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 2
    assert "quant option 'w8a8' is already defined by <modelplan>/conf/quant/w8a8.yaml" \
        in result.stderr and "defaults: [w8a8]" in result.stderr
    assert "pass --config-name ours_config" in result.stderr


def test_modelplan_job_names_the_file_too(tmp_path: Path) -> None:
    write_team_conf(tmp_path, {"model/bad.yaml": "defaults:\n  - tiny_bert\n  - _self_\n"
                                                 "random_init:\n  seed: -1\n"})
    result = subprocess.run([sys.executable, "-m", "planner.cli.hydra_app", "--config-dir", "conf",
                             "model=bad", "hydra.run.dir=out"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300, check=False,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    assert "conf/model/bad.yaml: model.random_init.seed: -1 is below the minimum 0" \
        in result.stderr


USER_VALUES = {
    "model": ["tiny_bert", "our_model", "our_plain"], "quant": ["w8a8", "our_int8", "none"],
    "target": ["cpu", "qnn_htp"], "export.opset": ["14", "18"],
    "+experiment": ["int8_cpu"], "model.random_init.seed": ["0", "1"],
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides=st.lists(st.sampled_from(sorted(USER_VALUES)), min_size=1, max_size=4,
                          unique=True).flatmap(
    lambda keys: st.tuples(*[st.sampled_from(USER_VALUES[k]) for k in keys]).map(
        lambda vals: [f"{k}={v}" for k, v in zip(keys, vals, strict=True)])))
def test_fast_compose_equals_hydra_with_a_user_tree(overrides: list[str], tmp_path_factory:
                                                    pytest.TempPathFactory) -> None:
    conf = _shared_conf(tmp_path_factory)
    tree, rest = from_cli([str(conf)], None, overrides)

    def outcome(fn):
        try:
            return fn(rest)
        except ConfigError:
            return "ConfigError"

    assert outcome(Composer(tree)) == outcome(lambda o: compose(o, tree))


_CONF: list[Path] = []


def _shared_conf(factory: pytest.TempPathFactory) -> Path:
    if not _CONF:
        _CONF.append(write_team_conf(factory.mktemp("team-h")))
    return _CONF[0]


def test_the_sweep_composer_swaps_in_plain_user_files(conf: Path) -> None:
    tree, _ = from_cli([str(conf)], None, [])
    composer = Composer(tree)
    for model in ("tiny_bert", "our_plain", "our_model"):
        composer([f"model={model}", "quant=w8a8"])
    assert composer.composes == 2  # the base, and our_model (it has a defaults list)
    assert composer(["model=our_plain"])["model"]["random_init"]["seed"] == 1
