"""The build server (planner/cli/server.py, serve.py): a command run through it prints and
exits as in-process, a server whose code changed is not used, a server gone mid-request or
before it falls back to in-process, and an idle server exits. Each test has its own cache dir
(short: the socket's path must fit) and stops every server it started."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from planner.cli import server
from tests.conftest import ROOT, run_cli

TINY_CPU = ["model=tiny_bert", "quant=none", "target=cpu", "verify=none", "perf=none"]
WARM_S = 240  # a loaded machine takes this long, at most, to import torch and the rest


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache dir of the test's own; the servers started in it are stopped at the end."""
    path = Path(tempfile.mkdtemp(prefix="mps", dir="/tmp"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(path))
    try:
        yield path
    finally:
        for pid in servers_of(path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)


def servers_of(cache: Path) -> list[int]:
    """The server processes started for `cache`, warm or still importing."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and b"planner.cli.serve" in (proc / "cmdline").read_bytes() \
                    and f"XDG_CACHE_HOME={cache}\0".encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
    return found


def on(cache: Path, **extra: str) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(cache), "MODELPLAN_SERVER": "1", **extra}


def logs(cache: Path) -> str:
    return "".join(p.read_text() for p in sorted((cache / "modelplan" / "server").glob("*.log")))


def log_of(cache: Path, pid: int) -> str:
    """The log of the server `pid`."""
    return next(t for p in (cache / "modelplan" / "server").glob("*.log")
                if f"pid {pid}:" in (t := p.read_text()))


def started_pids(cache: Path) -> list[int]:
    return [int(m) for m in re.findall(r"server \w+ pid (\d+)", logs(cache))]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in \
        Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


def served(cache: Path) -> int:
    """How many commands the servers of this cache dir have run."""
    return len(re.findall(r": modelplan ", logs(cache)))


def wait_for(check: Callable[[], object], what: str, timeout: float = WARM_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def start_server(cache: Path, cwd: Path = ROOT, **extra: str) -> int:
    """Start a server for the code at `cwd` and wait until it listens; its pid."""
    known = set(started_pids(cache))
    done = run_cli("server", "start", env=on(cache, **extra), cwd=cwd)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: set(started_pids(cache)) - known, "the server to start")
    pid = (set(started_pids(cache)) - known).pop()
    wait_for(lambda: any(p.read_text().strip() == str(pid)
                         for p in (cache / "modelplan" / "server").glob("*.pid")),
             "the server to listen")
    return pid


def test_a_command_through_the_server_prints_and_exits_as_in_process(cache: Path,
                                                                      tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "store"), "--outputs", str(tmp_path / "out")]
    here = run_cli("run", *TINY_CPU, *store, "--json", "--quiet")
    assert here.returncode == 0, here.stderr
    pid = start_server(cache)
    for args in (["run", *TINY_CPU, *store, "--json", "--quiet"],
                 ["plan", *TINY_CPU, "--store", str(tmp_path / "store")],
                 ["run", "model=tiny_bertx", *store],
                 ["plan", "--no-such-flag"]):
        before = served(cache)
        there = run_cli(*args, env=on(cache))
        local = run_cli(*args)
        assert served(cache) == before + 1, logs(cache)  # the server ran it
        assert (there.returncode, there.stderr) == (local.returncode, local.stderr), args
        if args[0] == "run" and there.returncode == 0:
            ran, here_ = json.loads(there.stdout), json.loads(local.stdout)
            assert [(s["id"], s["action"], s["key"]) for s in ran["steps"]] == \
                [(s["id"], s["action"], s["key"]) for s in here_["steps"]]
            assert {s["action"] for s in ran["steps"]} <= {"cached", "elided"}
        else:
            assert there.stdout == local.stdout
    bad = run_cli("run", "model=tiny_bertx", *store, env=on(cache))
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
    assert "did you mean 'tiny_bert'" in bad.stderr
    assert not (tmp_path / "out" / "tiny_bertx-none-cpu").exists()
    status = run_cli("server", "status", env=on(cache))
    assert re.fullmatch(rf"pid {pid}  current  socket \S+  log \S+\n", status.stdout), status.stdout
    stop = run_cli("server", "stop", env=on(cache))
    assert stop.stdout == "stopped 1 build server(s)\n"
    wait_for(lambda: not alive(pid), "the server to exit", 10)
    assert "stopped: exiting" in logs(cache)


def copy_of_the_code(where: Path) -> Path:
    for name in server.CODE_DIRS:
        shutil.copytree(ROOT / name, where / name, ignore=shutil.ignore_patterns("__pycache__"))
    return where


def test_a_server_of_older_code_is_not_used(cache: Path, tmp_path: Path) -> None:
    code = copy_of_the_code(tmp_path / "code")
    env = {"PYTHONPATH": str(code)}
    old = start_server(cache, cwd=code, **env)
    plan = ["plan", *TINY_CPU, "--store", str(tmp_path / "store")]
    first = run_cli(*plan, env=on(cache, **env), cwd=code)
    assert first.returncode == 0 and served(cache) == 1, first.stderr + logs(cache)
    edited = code / "planner" / "errors.py"
    os.utime(edited, ns=(edited.stat().st_atime_ns, edited.stat().st_mtime_ns + 10**9))
    second = run_cli(*plan, env=on(cache, **env), cwd=code)
    assert second.returncode == 0 and second.stdout == first.stdout, second.stderr
    assert served(cache) == 1, logs(cache)  # the old server did not run it: in-process
    wait_for(lambda: len(started_pids(cache)) == 2, "a server of the new code")
    (new,) = set(started_pids(cache)) - {old}
    wait_for(lambda: any(p.read_text().strip() == str(new)
                         for p in (cache / "modelplan" / "server").glob("*.pid")),
             "the new server to listen")
    third = run_cli(*plan, env=on(cache, **env), cwd=code)
    assert third.stdout == first.stdout and served(cache) == 2, logs(cache)
    assert log_of(cache, old).count(": modelplan plan") == 1
    assert log_of(cache, new).count(": modelplan plan") == 1


def test_a_server_gone_before_the_command_starts_falls_back(cache: Path,
                                                            tmp_path: Path) -> None:
    """A server that takes the request and dies (the socket closes before the command has
    started), one killed outright (its socket refuses) and one that never answers: the
    command runs in-process."""
    key = server.digest()  # what the client computes: the same code, Python and environment
    folder = cache / "modelplan" / "server"
    folder.mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(server.socket_path(key)))
    listener.listen()
    held = (folder / f"{key}.lock").open("a")  # "a server is warming up": start none
    fcntl.flock(held, fcntl.LOCK_EX)

    def die_mid_request() -> None:
        conn, _ = listener.accept()
        server.send_message(conn, {"ready": 0})
        _, fds = server.recv_message(conn, with_fds=True)
        for fd in fds:
            os.close(fd)
        conn.close()

    dying = threading.Thread(target=die_mid_request)
    dying.start()
    plan = ["plan", *TINY_CPU, "--store", str(tmp_path / "store")]
    local = run_cli(*plan)
    took = run_cli(*plan, env=on(cache))
    dying.join(timeout=60)
    assert not dying.is_alive()
    assert (took.returncode, took.stdout, took.stderr) == (local.returncode, local.stdout,
                                                           local.stderr)
    listener.close()  # now the socket file refuses, as a killed server's does
    refused = run_cli(*plan, env=on(cache))
    assert (refused.returncode, refused.stdout) == (local.returncode, local.stdout)
    assert refused.stderr == local.stderr
    server.socket_path(key).unlink()
    hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # listens, never answers
    hung.bind(str(server.socket_path(key)))
    hung.listen()
    t0 = time.monotonic()
    waited = run_cli(*plan, env=on(cache))
    assert (waited.returncode, waited.stdout, waited.stderr) == (local.returncode, local.stdout,
                                                                 local.stderr)
    assert time.monotonic() - t0 < server.HANDSHAKE_S + 30
    hung.close()
    held.close()
    assert not servers_of(cache)


def test_a_server_killed_during_a_command_still_answers_or_falls_back(cache: Path,
                                                                      tmp_path: Path) -> None:
    """The command's process outlives a server killed while it runs (the client gets its
    output and status); the next command finds the dead socket and runs in-process."""
    pid = start_server(cache)
    store = ["--store", str(tmp_path / "store"), "--outputs", str(tmp_path / "out")]
    args = [sys.executable, "-m", "planner.cli.main", "run", *TINY_CPU, *store, "--json",
            "--quiet"]
    client = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, **on(cache)})
    wait_for(lambda: served(cache) == 1, "the server to take the command", 60)
    os.kill(pid, signal.SIGKILL)
    out, err = client.communicate(timeout=600)
    assert client.returncode == 0, err
    assert {s["action"] for s in json.loads(out)["steps"]} <= {"run", "elided"}
    again = run_cli(*args[3:], env=on(cache, MODELPLAN_SERVER_IDLE="5"))
    assert again.returncode == 0, again.stderr
    assert {s["action"] for s in json.loads(again.stdout)["steps"]} <= {"cached", "elided"}
    assert served(cache) == 1  # in-process: the killed server's socket refused


def test_an_idle_server_exits_and_removes_its_socket(cache: Path) -> None:
    pid = start_server(cache, MODELPLAN_SERVER_IDLE="1")
    wait_for(lambda: not alive(pid), "the idle server to exit", 30)
    assert "idle for 1 s: exiting" in logs(cache)
    assert not list((cache / "modelplan" / "server").glob("*.sock"))
    assert not list((cache / "modelplan" / "server").glob("*.pid"))
    status = run_cli("server", "status", env=on(cache))
    assert status.stdout == "no build server is running\n"
