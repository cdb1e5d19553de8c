"""pre-commit hooks (`modelplan validate`, `--plan`) on a team's changed config files, and
the editor schemas of `modelplan schema --write` (draft 7, as yaml-language-server reads)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from planner.config.compose import CONF_DIR, GROUPS
from tests.conftest import ROOT, run_cli
from tests.teamconf import FILES, write_team_conf


def hook(hook_id: str, files: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a hook as pre-commit does: its entry, then the changed files that match `files`."""
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    h = hooks[hook_id]
    assert h["language"] == "python"
    import re

    matching = [f for f in files if re.search(h["files"], f)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run([*shlex.split(h["entry"]), *matching], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture()
def team(tmp_path: Path) -> Path:
    write_team_conf(tmp_path)
    (tmp_path / "README.md").write_text("not a config\n")
    return tmp_path


def test_validate_hook_passes_good_configs_and_skips_other_files(team: Path) -> None:
    files = [f"conf/{rel}" for rel in FILES] + ["README.md"]
    result = hook("modelplan-validate", files, team)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"modelplan validate: {len(FILES)} config file(s) compose and " \
                            "validate.\n"


def test_validate_hook_names_the_file_and_the_dotted_path(team: Path) -> None:
    write_team_conf(team, {"model/our_vit.yaml": "defaults:\n  - tiny_bert\n  - _self_\n"
                                                 "name: our_vit\nrandom_init:\n  seed: x\n",
                           "experiment/typo.yaml": "# @package _global_\nexport:\n  opst: 18\n"})
    result = hook("modelplan-validate", ["conf/model/our_vit.yaml", "conf/experiment/typo.yaml",
                                         "conf/model/our_model.yaml"], team)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        ("modelplan: error: conf/model/our_vit.yaml: model.random_init.seed: 'x' is not an "
        "integer"),
        ("modelplan: error: conf/experiment/typo.yaml: export.opst: unknown key (did you mean "
        "'export.opset'?); allowed here: exporter, fallback, genai_stages, generate_loop, hierarchy, "
        "inputs, on_host, opset, outputs, parts, report, shapes, torch_modules")]


def test_plan_check_hook_catches_a_reject_that_validates(team: Path) -> None:
    write_team_conf(team, {"htp_fp32.yaml": "defaults:\n  - config\n  - override model: "
                                            "our_model\n  - override quant: none\n  - _self_\n"})
    assert hook("modelplan-validate", ["conf/htp_fp32.yaml"], team).returncode == 0
    result = hook("modelplan-plan-check", ["conf/htp_fp32.yaml", "conf/ours.yaml"], team)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "modelplan: error: conf/htp_fp32.yaml (--config-name htp_fp32): quant=none: compile "
        "for qnn_htp needs a quantized")
    # a model whose weights are not on this machine still plans, with a symbolic key
    write_team_conf(team, {"model/site.yaml": "defaults:\n  - local_hf\n  - _self_\n"
                                              "name: site\npath: /weights/elsewhere\n"})
    ok = hook("modelplan-plan-check", ["conf/model/site.yaml"], team)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "modelplan validate: 1 config file(s) plan without a reject.\n"


def test_validate_mistakes(team: Path) -> None:
    missing = run_cli("validate", "conf/model/nope.yaml", cwd=team)
    assert missing.returncode == 2 and "conf/model/nope.yaml: no such file" in missing.stderr
    nodir = run_cli("validate", "--config-dir", "cfg", "x.yaml", cwd=team)
    assert nodir.returncode == 2 and "--config-dir cfg: not a directory" in nodir.stderr


def test_validate_never_passes_without_checking(team: Path) -> None:
    outside = team / "other" / "ours.yaml"
    outside.parent.mkdir()
    outside.write_text((team / "conf" / "ours.yaml").read_text())
    for args, needle in [(["other/ours.yaml"], "other/ours.yaml: not in the config tree conf/"),
                         ([], "no file given"),
                         (["README.md"], ("none of the 1 file(s) given is a .yaml file in the "
                                         "config tree conf/")),
                         (["--config-dir", "other", "conf/ours.yaml"],
                          "conf/ours.yaml: not in the config tree other/")]:
        result = run_cli("validate", *args, cwd=team)
        assert result.returncode == 2, (args, result.stdout)
        assert needle in result.stderr and "0 config file(s)" not in result.stdout
    # pre-commit hands the hooks only the files of the tree they check (and skips a hook
    # that no changed file matches)
    import re

    for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text()):
        assert re.search(h["files"], "conf/model/ours.yaml")
        assert not re.search(h["files"], ".pre-commit-config.yaml")


@pytest.fixture(scope="module")
def editor_schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("schemas") / ".schemas"
    result = run_cli("schema", "--write", str(out))
    assert result.returncode == 0, result.stderr
    assert "yaml-language-server: $schema=" in result.stdout
    return out


def load(path: Path) -> object:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def test_editor_schemas_are_draft_7_and_accept_every_packaged_file(editor_schemas: Path) -> None:
    assert sorted(p.name for p in editor_schemas.glob("*.json")) == sorted(
        [f"{g}.schema.json" for g in GROUPS] + ["config.schema.json"])
    for group in GROUPS:
        schema = json.loads((editor_schemas / f"{group}.schema.json").read_text())
        assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
        jsonschema.Draft7Validator.check_schema(schema)
        validator = jsonschema.Draft7Validator(schema)
        for path in (CONF_DIR / group).glob("*.yaml"):
            assert not list(validator.iter_errors(load(path))), path
    root = jsonschema.Draft7Validator(json.loads((editor_schemas / "config.schema.json")
                                                 .read_text()))
    assert not list(root.iter_errors(load(CONF_DIR / "config.yaml")))


def test_editor_schemas_check_a_teams_files(editor_schemas: Path, team: Path) -> None:
    def errors(group: str, rel: str) -> list[str]:
        schema = json.loads((editor_schemas / f"{group}.schema.json").read_text())
        return [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(
            load(team / "conf" / rel))]

    assert errors("model", "model/our_model.yaml") == []  # a fragment with a defaults list
    assert errors("quant", "quant/our_int8.yaml") == []
    assert errors("config", "experiment/int8_cpu.yaml") == []
    assert errors("config", "ours.yaml") == []
    write_team_conf(team, {"quant/bad.yaml": "name: bad\nper_chanel: true\nkind: int4\n",
                           "model/interp.yaml": "name: interp\nrandom_init:\n  seed: ${oc.env:S}"
                                                "\n  model_type: bert\n"})
    bad = errors("quant", "quant/bad.yaml")
    assert any("'per_chanel' was unexpected" in e for e in bad)
    assert any("'int4'" in e for e in bad)
    assert errors("model", "model/interp.yaml") == []  # interpolations are values too


def test_schema_prints_one_group_and_refuses_an_unwritable_dir(tmp_path: Path) -> None:
    printed = run_cli("schema", "quant")
    assert printed.returncode == 0
    assert json.loads(printed.stdout)["title"] == "modelplan config group 'quant' " \
                                                  "(conf/quant/*.yaml)"
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_cli("schema", "--write", str(blocker / "schemas"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "--write" in result.stderr and "Traceback" not in result.stderr
