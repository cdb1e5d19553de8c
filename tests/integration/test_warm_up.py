"""The fork server started before the plan is made (executors/run/forkserver.py warm_up): the plan keeps
it when its steps use torch, stops it otherwise (nothing to build, or ONNX steps only, which
must not wait for torch's imports), and a run whose config names another executor stops it."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from executors.local import LocalExecutor
from executors.run import forkserver
from planner.cli import app
from planner.config.compose import compose
from planner.planning import plan_for
from tests.integration.conftest import CPU_RUN


@pytest.fixture(autouse=True)
def no_server() -> Iterator[None]:
    forkserver.stop_server()
    yield
    forkserver.stop_server()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _has_torch() -> bool:
    import sys

    return "torch" in sys.modules


def server_imported_torch() -> bool:
    """Whether a process the fork server forks has torch imported before it runs anything."""
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        return pool.apply(_has_torch)


def test_a_plan_with_torch_steps_keeps_the_warm_server() -> None:
    forkserver.warm_up()
    pid = forkserver._server_pid()
    assert pid is not None and alive(pid)
    forkserver.preload(["onnx", "torch", "transformers"], start=True)
    assert forkserver._server_pid() == pid and alive(pid)
    assert server_imported_torch()


def test_a_plan_without_torch_steps_gets_a_server_without_torch() -> None:
    forkserver.warm_up()
    warm = forkserver._server_pid()
    assert warm is not None
    forkserver.preload(["onnx", "onnxruntime"], start=True)
    fresh = forkserver._server_pid()
    assert fresh not in (None, warm)
    assert not alive(warm)
    assert not server_imported_torch()


def test_a_later_plan_with_torch_steps_replaces_a_server_started_without_torch() -> None:
    """Runs in one process (an API user's, a test's): a plan of ONNX steps left a server that
    did not import torch; the next plan's torch steps must not each import it themselves."""
    forkserver.preload(["onnx", "onnxruntime"], start=True)
    cool = forkserver._server_pid()
    assert cool is not None and not server_imported_torch()
    forkserver.warm_up()  # the next run: the server it would keep lacks torch
    warm = forkserver._server_pid()
    assert warm not in (None, cool) and not alive(cool)
    forkserver.preload(["onnx", "torch", "transformers"], start=True)
    assert forkserver._server_pid() == warm and server_imported_torch()
    forkserver.stop_server()
    forkserver.preload(["onnx"], start=True)  # no warm_up (a plan made in the process)
    cool = forkserver._server_pid()
    forkserver.preload(["torch"], start=True)
    assert forkserver._server_pid() not in (None, cool) and server_imported_torch()


def test_a_fully_cached_run_leaves_no_server(cpu_run: dict[str, Any]) -> None:
    store = cpu_run["store"]  # CPU_RUN built there by `modelplan run`
    config = compose(list(CPU_RUN))
    config["store"]["path"] = str(store)
    assert cpu_run["record"]["status"] == "ok"
    forkserver.stop_server()
    forkserver.warm_up()
    warm = forkserver._server_pid()
    assert warm is not None
    cached = plan_for(config).to_json()
    assert {s["action"] for s in cached["steps"]} <= {"cached", "elided"}
    again = LocalExecutor(store, quiet=True).run(cached, None)
    assert again["status"] == "ok"
    assert forkserver._server_pid() is None and not alive(warm)
    assert all(p.pid != warm for p in psutil.Process(os.getpid()).children(recursive=True))


def test_warm_up_asks_the_executor_the_overrides_name(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class Fake:
        def __init__(self, name: str) -> None:
            self.name = name

        def warm_up(self) -> None:
            calls.append(f"warm {self.name}")

        def cool_down(self) -> None:
            calls.append(f"cool {self.name}")

        def __call__(self, *args: object, **kwargs: object) -> Fake:  # "instantiate"
            return self

    fakes = {"local": Fake("local"), "ray": Fake("ray")}
    monkeypatch.setattr(app, "_entry_points", lambda: fakes)
    monkeypatch.setattr(app, "executor_class", lambda name: fakes[name])
    monkeypatch.setattr(app, "_warmed", [])
    app.warm_up(["quant=none", "executor=ray"])
    app.warm_up(["executor=nosuch"])  # left for composing to report
    app.warm_up(["quant=none"])
    assert calls == ["warm ray", "warm local"]
    monkeypatch.setattr(app, "store_root", lambda config: Path("/nonexistent"))
    assert app.make_executor({"executor": {"name": "ray"}}, app.RunOptions()) is fakes["ray"]
    assert calls == ["warm ray", "warm local", "cool local"]


def test_the_default_warmed_executor_is_the_configs_default() -> None:
    assert compose([])["executor"]["name"] == app.DEFAULT_EXECUTOR


def test_a_server_that_cannot_start_is_left_to_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing.forkserver

    def no_processes_left() -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.forkserver, "ensure_running", no_processes_left)
    forkserver.warm_up()  # no error: the run goes on without a warm server
    assert forkserver._server_pid() is None and not forkserver._warm
    assert forkserver._PRELOAD == set(forkserver.BASE_PRELOAD)
