"""Shared fixtures: an isolated store per test session, a directory every xdist worker of the
session sees, and CLI helpers: one in a fresh process, one in the test's own."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from contextlib import chdir, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tests import budget, xdist_groups

ROOT = Path(__file__).resolve().parent.parent
# Commands run in-process, as before the build server; its own tests turn it on for theirs.
os.environ["MODELPLAN_SERVER"] = "0"


def shared_dir(factory: pytest.TempPathFactory) -> Path:
    """A directory of this test session that every xdist worker sees: the parent of the
    worker's own base temp dir under xdist (`popen-gwN`), the base temp dir itself without."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def pytest_configure(config: pytest.Config) -> None:
    budget.register(config)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    xdist_groups.assign(config, items)


@pytest.fixture(scope="session")
def session_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Never touch the user's real cache from tests; for the whole session, so that the builds
    # session fixtures make and the fork server they start see it too.
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        yield


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `modelplan ARGS` in a fresh process, as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], capture_output=True, check=False,
                          text=True, env=full_env, cwd=cwd or ROOT, timeout=timeout)


_forkserver_env: dict[int, dict[str, str]] = {}  # the fork server's pid -> its environment
# pytest's per-test variable, and what libraries set in this process as a test imports them
# (torch's compile cache, OpenMP's fork settings): a server started before they appeared is
# still the server of the test's environment
NOT_THE_TESTS = frozenset({"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "KMP_INIT_AT_FORK",
                           "KMP_DUPLICATE_LIB_OK"})


def environment() -> dict[str, str]:
    """This process's environment as a fork server started now would have it (what is not the
    test's aside)."""
    return {k: v for k, v in os.environ.items() if k not in NOT_THE_TESTS}


def run_cli_here(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`modelplan ARGS` in this process, for a test that is about what a command does and not
    about its process: what `run_cli` returns, without a new interpreter importing the planner
    and starting a fork server that imports torch. Runs in one test process share its fork
    server, so torch is imported once per process; their steps still run in other processes.
    A server started in another environment (a test that set a variable) is started afresh.
    An exception the CLI lets escape is printed with its traceback and exits 1, as Python does."""
    from executors.run import forkserver
    from planner.cli.main import main

    env = environment()
    server = forkserver._server_pid()
    if server is not None and _forkserver_env.get(server) != env:
        forkserver.stop_server()  # its workers would see another environment than the test's
    out, err = io.StringIO(), io.StringIO()
    with chdir(cwd or ROOT), redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except Exception:  # noqa: BLE001 - what the interpreter would print and exit with
            traceback.print_exc()
            code = 1
    if (server := forkserver._server_pid()) is not None:  # started in `env`, or checked above
        _forkserver_env.clear()
        _forkserver_env[server] = env
    return subprocess.CompletedProcess(["modelplan", *args], code, out.getvalue(), err.getvalue())
