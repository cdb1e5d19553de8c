"""`run_cli_here` (tests/conftest.py), the builds' helper that runs a command in the test's own
process: it returns what `run_cli` returns in a fresh process, and a fork server started in
another environment than the test's is not reused (its workers would not see the test's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from executors.run import forkserver
from tests import conftest
from tests.conftest import run_cli, run_cli_here


@pytest.mark.parametrize("args", [
    ("plan", "model=tiny_bert", "target=cpu", "--format", "json"),
    ("plan", "model=tiny_bert", "quant=nope"),        # a config error: one line, exit 2
    ("plan", "model=tiny_bert", "--no-such-option"),  # argparse's usage error, exit 2
])
def test_in_this_process_as_in_a_fresh_one(args: tuple[str, ...]) -> None:
    here, fresh = run_cli_here(*args), run_cli(*args)
    assert (here.returncode, here.stdout, here.stderr) == \
        (fresh.returncode, fresh.stdout, fresh.stderr)


@pytest.fixture
def server() -> Iterator[int]:
    """A fork server that imports no heavy library, started for the test and stopped after."""
    forkserver.stop_server()
    forkserver.preload([], start=True)
    pid = forkserver._server_pid()
    assert pid is not None
    yield pid
    forkserver.stop_server()


def started_here(pid: int) -> None:
    """As if a build run by run_cli_here had started the server in this environment."""
    conftest._forkserver_env.clear()
    conftest._forkserver_env[pid] = conftest.environment()


def test_a_server_of_the_same_environment_is_kept(server: int) -> None:
    started_here(server)
    assert run_cli_here("plan", "model=tiny_bert").returncode == 0
    assert forkserver._server_pid() == server


def test_a_server_of_another_environment_is_stopped(server: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    started_here(server)
    monkeypatch.setenv("MODELPLAN_TEST_VARIABLE", "set by the test")
    assert run_cli_here("plan", "model=tiny_bert").returncode == 0
    assert forkserver._server_pid() is None  # a plan starts none: the next build starts one


def test_a_server_started_elsewhere_is_stopped(server: int) -> None:
    conftest._forkserver_env.clear()
    assert run_cli_here("plan", "model=tiny_bert").returncode == 0
    assert forkserver._server_pid() is None
