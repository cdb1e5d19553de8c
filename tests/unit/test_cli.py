"""The CLI as a user meets it: formats, -o, exit codes, one-line errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("overrides,needle", [
    (["quant.activation_type=uint12"], "quant.activation_type: 'uint12' is not one of"),
    (["quant=w8a9"], "quant: 'w8a9' is not one of"),
    (["target=qnn_htp", "quant=none"], "quant=none: compile for qnn_htp needs a quantized"),
    (["model=local_hf"], "model.path: required but not set"),
    (["model=local_hf", "model.path=/nonexistent/dir"], "'/nonexistent/dir' does not exist"),
    (["model=hub_cache", "model.hub_id=org/unknown-model"], "not in the local Hugging Face cache"),
])
def test_bad_config_exits_2_with_one_clear_line(overrides: list[str], needle: str,
                                                tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = run_cli("plan", *overrides, "-o", str(out), "--store", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("modelplan: error: "), result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr
    assert not out.exists()  # no half-written artifact


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = run_cli("plan", "quant=w8a9", "--debug", "--store", str(tmp_path))
    assert result.returncode != 0 and "Traceback" in result.stderr


@pytest.mark.parametrize("fmt,first", [("json", "{"), ("md", "### modelplan plan"),
                                       ("mermaid", "flowchart TD"), ("text", "modelplan plan")])
def test_formats_and_output_file(fmt: str, first: str, tmp_path: Path) -> None:
    out = tmp_path / f"plan.{fmt}"
    result = run_cli("plan", "model=tiny_bert", "--format", fmt, "-o", str(out),
                     "--store", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Plan: 10 to run, 0 cached, 1 elided. Written to")
    assert out.read_text().startswith(first)
    if fmt == "json":
        assert json.loads(out.read_text())["summary"]["elided"] == 1


def test_options_may_follow_overrides(tmp_path: Path) -> None:
    result = run_cli("plan", "model=tiny_bert", "--format", "json", "target=cpu",
                     "--store", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["target"]["name"] == "cpu"


def test_config_prints_the_resolved_config() -> None:
    result = run_cli("config", "model=tiny_bert", "quant=w8a8", "--json")
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config["quant"]["activation_type"] == "uint8"
    assert config["model"]["random_init"]["config"]["hidden_size"] == 64


def test_unknown_option_is_a_usage_error() -> None:
    result = run_cli("plan", "--frmat", "json")
    assert result.returncode == 2 and "unrecognized option" in result.stderr
