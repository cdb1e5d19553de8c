"""The build server's client: `modelplan run`, `plan`, `apply` and `config` go through a
long-lived process that has already imported the libraries (planner/cli/serve.py), so their
fixed cost is a fork, not an interpreter start and seconds of imports.

The client sends the server its arguments, working directory and environment, and its own
stdin, stdout and stderr (SCM_RIGHTS over the server's Unix socket): the command runs in a
process forked for it that writes straight to the client's terminal or pipes. Ctrl-C is
forwarded; the client exits with the command's exit status. The fds are sent only to a process
that has said it is there (a hung server would hold the client's pipes open in its queue), and
a server that does not answer within HANDSHAKE_S seconds is not waited for.

The server is never stale: its socket is named by a digest of the code (every file of planner/,
executors/, schemas/ and hydra_plugins/: path, size and mtime), the packaged conf/ tree, the
Python executable, the versions of the libraries it imports and the environment those read
when imported. A change means another socket, so a new server; the old one exits when it sees
the change or when idle. The client never waits on a server: when there is none, or anything
fails before the command has started there, the command runs in this process as it always
did, and a server is started in the background for the next command.

MODELPLAN_SERVER=0 turns the server off; MODELPLAN_SERVER_IDLE is the idle time in seconds
after which it exits (default 600).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from planner.errors import UsageError
from planner.support import dists
from planner.support.machine import user_cache_dir

ENV = "MODELPLAN_SERVER"
IDLE_ENV = "MODELPLAN_SERVER_IDLE"
IDLE_S = 600.0
SERVED = ("run", "plan", "apply", "config")  # the commands that compose, plan or run
ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("planner", "executors", "schemas", "hydra_plugins", "conf")
PACKAGES = ("torch", "transformers", "onnx", "onnxruntime", "onnxruntime-qnn", "hydra-core",
            "omegaconf", "modelplan")
# Environment variables the imported libraries (or Python) read when they are imported: a
# server imported them with its own values, so they are part of its key.
IMPORT_ENV = ("PYTHON", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TORCH", "PYTORCH_", "ORT_",
              "OMP_", "MKL_", "TOKENIZERS_", "QNN_", "LD_", "XDG_CACHE_HOME")
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes
HANDSHAKE_S = 10.0  # a server that has not started the command by then is not waited for
serving = False  # True in a command the server runs: it never calls a server itself
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0" and not serving


def idle_seconds() -> float:
    try:
        return float(os.environ.get(IDLE_ENV, IDLE_S))
    except ValueError:
        return IDLE_S


def command_name(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def served(argv: list[str]) -> bool:
    """Whether `argv` is a command the server runs (and the server is on)."""
    return command_name(argv) in SERVED and enabled()


def server_dir() -> Path:
    return user_cache_dir() / "server"


def digest(environ: dict[str, str] | None = None) -> str:
    """The key of the code, config tree, interpreter, libraries and import-time environment
    (`environ`, default this process's) a server serves; a server answers only on the socket
    its own key names."""
    environ = os.environ if environ is None else environ
    h = hashlib.sha256(f"{sys.executable}\0{sys.version}\n".encode())
    for name in CODE_DIRS:
        for dirpath, dirnames, filenames in os.walk(ROOT / name):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in sorted(filenames):
                if f.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(dirpath, f)
                with contextlib.suppress(OSError):
                    st = os.stat(path)
                    h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    h.update(json.dumps(_versions()).encode())
    h.update(json.dumps(sorted((k, v) for k, v in environ.items()
                               if k.startswith(IMPORT_ENV))).encode())
    return h.hexdigest()[:20]


def _versions() -> dict[str, str | None]:
    found = dists.installed()
    return {name: found.get(dists.normalize(name)) for name in PACKAGES}


def socket_path(key: str) -> Path:
    return server_dir() / f"{key}.sock"


# -- the wire: one length-prefixed JSON message per frame ---------------------------------
def send_message(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode()
    frame = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [frame], list(fds))
    else:
        sock.sendall(frame)


def recv_message(sock: socket.socket, with_fds: bool = False) -> tuple[dict[str, Any], list[int]]:
    """One message (and the file descriptors sent with it); EOFError if the peer went away."""
    if with_fds:
        head, fds, _, _ = socket.recv_fds(sock, 4, 8)
    else:
        head, fds = sock.recv(4, socket.MSG_WAITALL), []
    if len(head) < 4:
        raise EOFError("the build server closed the connection")
    (size,) = struct.unpack("!I", head)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("the build server closed the connection")
        data += chunk
    return json.loads(data), fds


# -- the client -----------------------------------------------------------------------------
def run_on_server(argv: list[str]) -> int | None:
    """Run `modelplan ARGV` on the build server; its exit status, or None when it did not
    start there (then the caller runs it in-process; a server is started for next time)."""
    key = digest()
    path = socket_path(key)
    if len(str(path)) > MAX_SOCKET_PATH:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HANDSHAKE_S)
    try:
        sock.connect(str(path))
        recv_message(sock)  # a process is there to take the fds: none is left in a queue
        send_message(sock, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)},
                     [0, 1, 2])
        started, _ = recv_message(sock)
        if "pid" not in started:
            raise EOFError(started.get("error", "no command process"))
    except (OSError, EOFError, ValueError):
        sock.close()
        start(key)
        return None
    sock.settimeout(None)
    with sock:
        return _wait(sock)


def _wait(sock: socket.socket) -> int:
    """Forward Ctrl-C (and SIGTERM) to the command's process until its exit status arrives."""
    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(OSError):
            send_message(sock, {"signal": signum})

    saved = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)
             if signal.getsignal(s) is not signal.SIG_IGN}  # ignored here: ignored there
    try:
        while True:
            try:
                done, _ = recv_message(sock)
            except EOFError:
                print("modelplan: error: the build server ended during the command; "
                      "run it again (MODELPLAN_SERVER=0 runs it without the server)",
                      file=sys.stderr)
                return 1
            if "exit" in done:
                return int(done["exit"])
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def start(key: str) -> None:
    """Start a server for `key` in the background, detached, its log in the server dir; a
    failure here is silent (the next command tries again)."""
    import subprocess

    folder = server_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(folder / f"{key}.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # a server holds the key: warming up, or serving
        with open(folder / f"{key}.log", "ab") as log:
            subprocess.Popen([sys.executable, "-m", "planner.cli.serve", key],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True, close_fds=True)
    except OSError:
        pass


def _alive(pidfile: Path) -> int | None:
    """The pid a pid file names, if that process still runs."""
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


def servers(folder: Path | None = None) -> list[dict[str, Any]]:
    """The running servers whose pid files are in `folder` (default: the server dir): key,
    pid, whether it serves the current code, socket, log."""
    current = digest()
    found = []
    for pidfile in sorted((folder or server_dir()).glob("*.pid")):
        pid = _alive(pidfile)
        if pid is None:
            continue
        found.append({"key": pidfile.stem, "pid": pid, "current": pidfile.stem == current,
                      "socket": str(pidfile.with_suffix(".sock")),
                      "log": str(pidfile.with_suffix(".log"))})
    return found


def command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    COMMANDS[fn.__name__.removeprefix("cmd_")] = fn
    return fn


@command
def cmd_server(args: argparse.Namespace) -> int:
    if args.action == "start":
        if not enabled():
            raise UsageError(f"server start: the build server is off ({ENV}=0); unset {ENV}")
        start(digest())
        return 0
    found = servers()
    if args.action == "status":
        if not enabled():
            print(f"the build server is off ({ENV}=0)")
        for s in found:
            print(f"pid {s['pid']}  {'current' if s['current'] else 'stale (exits when idle)'}"
                  f"  socket {s['socket']}  log {s['log']}")
        if not found:
            print("no build server is running")
        return 0
    for s in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(s["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(Path(s["socket"]).with_suffix(".pid"))
                                              for s in found):
        time.sleep(0.05)
    print(f"stopped {len(found)} build server(s)")
    return 0


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    sp = sub.add_parser("server", parents=[common], help="the build server that keeps the "
                        "libraries imported between commands: status, start, stop")
    sp.set_defaults(handler=cmd_server)
    sp.add_argument("action", choices=["status", "start", "stop"])
