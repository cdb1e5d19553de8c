"""Shared fixtures: an isolated store per test session, a directory every xdist worker of the
session sees, and a CLI helper."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    from _pytest.nodeid import NodeId  # pytest >= 9
except ImportError:  # pytest 8: pytest-xdist's own suffix works
    NodeId = None

ROOT = Path(__file__).resolve().parent.parent
# Commands run in-process, as before the build server; its own tests turn it on for theirs.
os.environ["MODELPLAN_SERVER"] = "0"


def shared_dir(factory: pytest.TempPathFactory) -> Path:
    """A directory of this test session that every xdist worker sees: the parent of the
    worker's own base temp dir under xdist (`popen-gwN`), the base temp dir itself without."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--dist loadgroup` sends the tests of one xdist_group to one worker by the `@group`
    suffix pytest-xdist (3.8) adds to their ids; it sets `item._nodeid`, which pytest 9 no
    longer reads (a test's id is `item._id`), so the groups were ignored. Add the suffix here."""
    if NodeId is None or not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture(scope="session")
def session_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    # Never touch the user's real cache from tests.
    cache = tmp_path_factory.getbasetemp() / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `modelplan ARGS` in a fresh process, as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], capture_output=True, check=False,
                          text=True, env=full_env, cwd=cwd or ROOT, timeout=timeout)
