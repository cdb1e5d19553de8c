"""A key the chosen option ignores is an error naming the options that read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.config.compose import compose
from planner.config.conftree import PACKAGED
from planner.config.unread import readers_of, unread_keys
from planner.config.validate import check_config
from planner.errors import ConfigError
from planner.planning import plan_sweep
from tests.conftest import run_cli


def test_run_with_a_path_the_default_model_ignores_builds_nothing(tmp_path: Path) -> None:
    result = run_cli("run", "model.path=./mymodel", "target=cpu", "--store",
                     str(tmp_path / "store"), "--outputs", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == ("modelplan: error: model.path is set but model=minilm "
                                      "does not read it; did you mean model=local_hf, "
                                      "model=onnx_file or model=hub_cache?")
    assert not (tmp_path / "out").exists() and not (tmp_path / "store").exists()


@pytest.mark.parametrize(("overrides", "needle"), [
    (["model=tiny_bert", "model.package=x"], "model.package is set but model=tiny_bert"),
    (["model=local_hf", "model.path=/m", "model.hub_id=a/b"], "did you mean model=hub_cache?"),
    (["quant=none", "quant.per_channel=true"], "quant=none does not read it"),
    (["quant=fp16", "quant.calibration={method: minmax, samples: 4}"], "quant=w8a16"),
    (["target=cpu", "target.cpu_fallback=false"], "did you mean target=qnn_htp?"),
    (["verify=none", "verify.threshold=0.5"], "did you mean verify=cosine?"),
])
def test_every_group_rejects_what_its_option_ignores(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("?", r"\?")):
        check_config(compose(overrides))


def test_sweep_jobs_are_checked_the_same_way() -> None:
    sweep = plan_sweep(["model=minilm,local_hf", "model.path=/nowhere"], symbolic=True)
    errors = [j.error or "" for j in sweep.jobs]
    assert "model=minilm does not read it" in errors[0]
    assert "does not read it" not in errors[1]


def test_every_packaged_option_sets_what_it_ignores_to_the_unset_value() -> None:
    for group in ("model", "quant", "target", "verify"):
        for option in PACKAGED.options(group):
            node = compose([f"{group}={option}"])[group]
            for key, unset in unread_keys(group, node).items():
                assert node[key] == unset, (group, option, key)
    assert readers_of("model", "random_init") == ["tiny_bert", "tiny_random"]


def test_random_init_config_values_keep_the_model_types_json_types() -> None:
    from planner.planning import plan_for

    with pytest.raises(ConfigError, match=r"model.random_init.config.hidden_size: 'abc' is not "
                                          r"an integer; give it an integer"):
        plan_for(compose(["model=tiny_bert", "model.random_init.config={hidden_size: abc}"]))
    from planner.models.sources import random_init

    clip = {"random_init": {"model_type": "clip", "seed": 0, "preprocessor": {},
                            "config": {"text_config": {"vocab_size": "many"}}}}
    with pytest.raises(ConfigError, match=r"config.text_config.vocab_size: .* not an integer"):
        random_init(clip)
    plan_for(compose(["model=tiny_bert", "model.random_init.config={hidden_size: 48}"]))


def test_a_key_set_inside_an_open_mapping_says_how_to_add_it() -> None:
    """`model.random_init.config` takes any key of the model type's config: a new one is added
    with `+`, and the hint is a command that runs as printed."""
    base = ["plan", "model=tiny_random", "model.task=feature-extraction", "target=cpu"]
    said = run_cli(*base, "model.random_init.config.hidden_size=48")
    assert said.returncode == 2 and "Traceback" not in said.stderr
    hint = "add it with +model.random_init.config.hidden_size=48"
    assert hint in said.stderr.strip().splitlines()[-1]
    assert run_cli(*base, "+model.random_init.config.hidden_size=48").returncode == 0
    typed = run_cli(*base, "+model.random_init.config.hidden_size=abc")
    assert typed.returncode == 2 and "'abc' is not an integer" in typed.stderr


def test_a_group_chosen_on_the_command_line_sets_aside_what_a_file_set_in_it(
        tmp_path: Path) -> None:
    """An imported recipe evaluates on a dataset; `eval=none` turns that off, as asked, and
    the config is eval=none's; a key the command line sets itself is still checked."""
    from planner.config.conftree import ConfigTree

    (tmp_path / "mine.yaml").write_text(
        "defaults:\n  - config\n  - override model: tiny_bert\n  - override eval: task\n"
        "  - _self_\neval:\n  dataset:\n    path: org/data\n    samples: 100\n")
    tree = ConfigTree((tmp_path,), "mine")
    config = compose(["eval=none"], tree)
    check_config(config, tree)
    assert config["eval"] == compose(["eval=none"])["eval"]
    assert compose([], tree)["eval"]["dataset"]["path"] == "org/data"
    with pytest.raises(ConfigError, match="eval.dataset is set but eval=none"):
        check_config(compose(["eval=none", "eval.dataset.path=x"], tree), tree)
    sweep = plan_sweep(["eval=none,task", "eval.dataset.path=null", "target=cpu", "quant=none"],
                       tree=tree)
    assert len(sweep.jobs) == 2
