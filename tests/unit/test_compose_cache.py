"""The build server's compose cache (planner/config/composecache.py): a compose is kept under its
overrides and the environment variables the config reads, a hit is a fresh copy equal to a
new compose, and nothing is kept that depends on anything else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.config import compose as compose_module
from planner.config import composecache
from planner.config.compose import compose
from planner.config.conftree import ConfigTree

ENV_EXPORTER = "export.exporter=${oc.env:MODELPLAN_TEST_EXPORTER}"


@pytest.fixture
def composes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """The overrides of each compose Hydra really ran; the cache is turned on by the test (as
    the server does) and off at its end."""
    ran: list[list[str]] = []
    real = compose_module.compose_config

    def counted(overrides: list[str], tree: ConfigTree = compose_module.PACKAGED) -> object:
        ran.append(list(overrides))
        return real(overrides, tree)

    monkeypatch.setattr(compose_module, "compose_config", counted)
    try:
        yield ran
    finally:
        composecache.disable()


def test_a_compose_is_kept_under_its_overrides(composes: list[list[str]]) -> None:
    expected = {ov: compose(list(ov)) for ov in (("model=tiny_bert",),
                                                 ("model=tiny_bert", "quant=none"))}
    composes.clear()
    composecache.enable()
    first = compose(["model=tiny_bert"])
    again = compose(["model=tiny_bert"])
    assert composes == [["model=tiny_bert"]]  # the second was the kept one
    assert again == first == expected[("model=tiny_bert",)]
    again["quant"]["name"] = "changed"  # a hit is the caller's own copy
    assert compose(["model=tiny_bert"]) == first
    other = compose(["model=tiny_bert", "quant=none"])
    assert composes[-1] == ["model=tiny_bert", "quant=none"]
    assert other != first and other == expected[("model=tiny_bert", "quant=none")]
    assert other["quant"]["name"] == "none" and first["quant"]["name"] != "none"


def test_an_environment_variable_the_config_reads_is_honoured(
        composes: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    composecache.enable()
    monkeypatch.setenv("MODELPLAN_TEST_EXPORTER", "torchscript")
    assert compose(["model=tiny_bert", ENV_EXPORTER])["export"]["exporter"] == "torchscript"
    assert compose(["model=tiny_bert", ENV_EXPORTER])["export"]["exporter"] == "torchscript"
    assert len(composes) == 1
    monkeypatch.setenv("MODELPLAN_TEST_EXPORTER", "dynamo")
    assert compose(["model=tiny_bert", ENV_EXPORTER])["export"]["exporter"] == "dynamo"
    assert len(composes) == 2
    monkeypatch.setenv("MODELPLAN_UNREAD", "1")  # a variable the config does not read
    assert compose(["model=tiny_bert", ENV_EXPORTER])["export"]["exporter"] == "dynamo"
    assert len(composes) == 2


def test_what_reads_more_than_the_config_and_the_environment_is_not_kept(
        composes: list[list[str]], tmp_path: Path) -> None:
    composecache.enable()
    assert composecache.env_reads(["${oc.env:A}", "${oc.env:'B',x}", "${oc.select:a.b,1}",
                                   "${model.name}", "plain"]) == {"A", "B"}
    for reads_more in ("${now:%H}", "${hydra:runtime.cwd}", "${oc.env:${model.name}}",
                       "${mine:x}"):
        assert composecache.env_reads(["${oc.env:A}", reads_more]) is None, reads_more
    user = tmp_path / "conf" / "model"
    user.mkdir(parents=True)
    (user / "ours.yaml").write_text("defaults: [tiny_bert]\n")
    tree = ConfigTree((tmp_path / "conf",))
    compose(["model=ours"], tree)
    compose(["model=ours"], tree)
    assert len(composes) == 2  # user config dirs are not in the server's key: never kept
    assert composecache._entries == {}


def test_the_cache_is_off_until_enabled(composes: list[list[str]]) -> None:
    compose(["model=tiny_bert"])
    compose(["model=tiny_bert"])
    assert len(composes) == 2 and composecache._entries == {}


def test_a_server_keeps_the_newest_entries_within_its_bounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(composecache, "MAX_ENTRIES", 3)
    monkeypatch.setattr(composecache, "MAX_BYTES", 100)
    try:
        for n in range(5):
            composecache.learn(f"k{n}", "x" * 10)
        assert list(composecache._entries) == ["k2", "k3", "k4"]
        composecache.learn("big", "x" * 95)  # with k4: over MAX_BYTES
        assert list(composecache._entries) == ["big"]
    finally:
        composecache.disable()
