"""The build server's key (planner/cli/server.py: digest) and its warm fork server
(executors/run/warmfork.py): the key changes with what a server has loaded (code, conf/, the
libraries' versions, the environment they read when imported) and with nothing else; a process
that imported the tools forks its fork server warm, and processes start from it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from planner.cli import server
from tests.conftest import ROOT


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in (("planner/cli/main.py", "x = 1\n"), ("conf/model/a.yaml", "name: a\n"),
                       ("executors/local.py", "y = 2\n"), ("schemas/s.json", "{}\n")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(server, "ROOT", tmp_path)
    return tmp_path


def test_the_key_follows_code_conf_versions_and_import_time_environment(
        tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = server.digest()
    assert server.digest() == key
    monkeypatch.setenv("MODELPLAN_UNRELATED", "1")  # read at run time, not at import
    (tree / "planner" / "cli" / "__pycache__").mkdir()
    (tree / "planner" / "cli" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"x")
    assert server.digest() == key
    keys = {key}
    versions = server._versions()
    for change in ("code", "conf", "new file", "version", "env"):
        if change == "code":  # same size, a later mtime (an edit, seconds after)
            main = tree / "planner" / "cli" / "main.py"
            main.write_text("x = 2\n")
            os.utime(main, ns=(main.stat().st_atime_ns, main.stat().st_mtime_ns + 10**9))
        elif change == "conf":
            (tree / "conf" / "model" / "a.yaml").write_text("name: ab\n")
        elif change == "new file":
            (tree / "executors" / "new.py").write_text("")
        elif change == "version":
            monkeypatch.setattr(server, "_versions", lambda: {**versions, "torch": "0.0.0"})
        else:
            monkeypatch.setenv("HF_HOME", "/elsewhere")
        now = server.digest()
        assert now not in keys, change
        keys.add(now)


def test_a_command_is_served_only_when_the_server_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELPLAN_SERVER", "1")
    assert [server.served(a) for a in (["run", "x=1"], ["--debug", "plan"], ["apply", "p.json"],
                                        ["config"], ["store", "ls"], ["server", "stop"], [])] \
        == [True, True, True, True, False, False, False]
    monkeypatch.setenv("MODELPLAN_SERVER", "0")
    assert not server.served(["run"])


def test_a_process_that_imported_the_tools_forks_its_fork_server_warm() -> None:
    """The fork server is this process forked (its command line), not a new interpreter, and
    a process it starts runs and exits."""
    script = textwrap.dedent("""
        import os, sys
        from pathlib import Path
        from executors.run import forkserver
        forkserver.import_tools()
        forkserver.preload(["onnx"], start=True)
        pid = forkserver._server_pid()
        mine = Path("/proc/self/cmdline").read_bytes()
        assert Path(f"/proc/{pid}/cmdline").read_bytes() == mine, "not forked from here"
        proc = forkserver._context().Process(target=os.getpid)
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0, proc.exitcode
        forkserver.stop_server()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False)
    assert done.stdout == "ok\n", done.stderr
