"""`--help` teaches: the command list has one line per command, and `plan --help` /
`run --help` list every config group of conf/ with its options and keys, read from the tree."""

from __future__ import annotations

import re

import pytest
import yaml

from planner.cli.main import parser
from tests.conftest import ROOT


def help_of(*argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        parser().parse_args([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_the_command_list_has_one_line_per_command(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys=capsys)
    listing = text.split("  COMMAND\n", 1)[1].split("\n\n", 1)[0].splitlines()
    names = [m.group(1) for line in listing if (m := re.match(r"    (\S+)\s{2,}\S", line))]
    assert len(names) == len(listing), listing  # no help runs onto a second line
    assert {"plan", "run", "apply", "diff", "diagnose", "import", "store", "generate"} <= set(names)


@pytest.mark.parametrize("command", ["plan", "run"])
def test_plan_and_run_help_list_every_config_group(command: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(command, capsys=capsys)
    groups = text.split("config groups", 1)[1]
    primary = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    for entry in (e for e in primary["defaults"] if isinstance(e, dict)):
        (group, default), = entry.items()
        block = re.split(r"\n  (?=\S)", groups.split(f"\n  {group}\n", 1)[1], maxsplit=1)[0]
        assert re.search(rf"^    {default} \*", block, re.MULTILINE), (group, block)
        for option in (ROOT / "conf" / group).glob("*.yaml"):
            assert re.search(rf"^    {option.stem}\b", block, re.MULTILINE), option
        assert f"keys: {group}." in block
    assert "quant.calibration.samples=16" in groups and "model.path=null" in groups
    assert "An existing ONNX model: set model.path=" in groups  # what an option is, from its file
