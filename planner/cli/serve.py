"""The build server (`python -m planner.cli.serve KEY`; started by planner/cli/server.py): a
long-lived process that imports the CLI, Hydra and what the default executor's steps import
(torch, transformers, onnx, ONNX Runtime: the executor plugin's `warm_imports`) once, then
serves commands on the Unix socket its key names until it is idle for MODELPLAN_SERVER_IDLE
seconds, its key is no longer the code's, or it gets SIGTERM (`modelplan server stop`).

Per command it forks a waiter, which forks the command's process: that process takes the
client's stdin, stdout and stderr (sent over the socket), working directory and environment,
and runs the CLI's `main(argv)` as the client would have; the waiter forwards the client's
signals to it and sends back its exit status (a client that goes away interrupts it). The
server itself runs nothing but accept and fork, on one thread, so a fork is always safe.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import io
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from planner.cli import server
from planner.config import composecache

CHECK_S = 30.0  # how often an idle server checks that its key is still the code's
MAX_LEARNED = 1 << 20  # the largest composed config a command sends the server, in bytes
_SET_ON_IMPORT: dict[str, str] = {}  # the defaults the imports set (executors/__init__.py's)
_LEARNING: list[socket.socket] = []  # where a command sends what it composed


def warm() -> None:
    """Import what the commands the server runs import, so their processes start warm."""
    from planner import planning
    from planner.cli import app, main
    from planner.config.compose import compose
    from planner.errors import ModelplanError
    from planner.render import render, results, run  # noqa: F401

    try:  # an install of the planning core alone has no executor to warm
        main.parser(plugins=True)
        cls = app.executor_class(app.DEFAULT_EXECUTOR)
        if hasattr(cls, "warm_imports"):
            cls.warm_imports()
    except (ImportError, ModelplanError) as exc:
        print(f"warming up: {exc}", flush=True)
    try:  # Hydra's first compose finds its plugins and parses the tree; planning loads rules
        render(planning.plan_for(compose(["model=tiny_bert"]), symbolic=True).to_json(), "text")
    except ModelplanError as exc:
        print(f"warming up: {exc}", flush=True)


def serve(key: str) -> int:
    folder = server.server_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = open(folder / f"{key}.lock", "a")  # noqa: SIM115 - held for the server's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another server has this key
    environ = dict(os.environ)  # as the client had it (the libraries may set some)
    if server.digest(environ) != key:
        return 0  # the code changed since the client asked
    started = time.perf_counter()
    composecache.enable()  # what the warm-up and the commands compose is kept here
    warm()
    _SET_ON_IMPORT.update({k: v for k, v in os.environ.items() if k not in environ})
    gc.freeze()  # the commands' collections never walk (and so copy) the server's objects
    print(f"{time.strftime('%F %T')} server {key} pid {os.getpid()}: warm in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    path = server.socket_path(key)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    listener.bind(str(tmp))
    listener.listen(16)
    os.replace(tmp, path)
    pidfile = path.with_suffix(".pid")
    pidfile.write_text(f"{os.getpid()}\n")
    learned, sender = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    sender.setblocking(False)  # a command never waits on the server
    _LEARNING[:] = [sender]
    try:
        _loop(listener, learned, lambda: server.digest(environ) == key, lock)
    finally:
        listener.close()
        for own in (path, pidfile):
            with contextlib.suppress(OSError):
                own.unlink()
    return 0


def _loop(listener: socket.socket, learned: socket.socket, current: Callable[[], bool],
          lock: Any) -> None:
    stop: list[int] = []
    woken, wake = os.pipe()  # a signal wakes the select (which Python would resume)
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: stop.append(signum))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    idle = server.idle_seconds()
    last = time.monotonic()
    while True:
        left = last + idle - time.monotonic()
        if stop or left <= 0:
            print(f"{time.strftime('%F %T')} "
                  f"{'stopped' if stop else f'idle for {idle:.0f} s'}: exiting", flush=True)
            return
        ready, _, _ = _select([listener, woken, learned], min(left, CHECK_S))
        if woken in ready:
            os.read(woken, 512)
            continue
        if learned in ready:
            _learn(learned)
            continue
        if not ready:
            if not current():
                print(f"{time.strftime('%F %T')} the code changed: exiting", flush=True)
                return
            continue
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        last = time.monotonic()
        if os.fork() == 0:  # the waiter holds neither the socket nor the key's lock
            listener.close()
            learned.close()
            lock.close()
            signal.set_wakeup_fd(-1)
            os.close(woken)
            os.close(wake)
            _wait_for_command(conn)
        conn.close()


def _learn(learned: socket.socket) -> None:
    """Keep a config a command composed, for the commands forked after it."""
    try:
        message = json.loads(learned.recv(MAX_LEARNED))
        composecache.learn(str(message["key"]), str(message["entry"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass


def _share(key: str, entry: str) -> None:
    """A command's newly composed config, sent to the server (dropped if it cannot take it)."""
    with contextlib.suppress(OSError):
        _LEARNING[0].send(json.dumps({"key": key, "entry": entry}).encode())


def _select(reads: list[Any], timeout: float) -> tuple[list, list, list]:
    try:
        return select.select(reads, [], [], timeout)
    except InterruptedError:
        return [], [], []


def _wait_for_command(conn: socket.socket) -> None:
    """The waiter: start the command's process, forward signals to it, send its status."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
        if uid != os.getuid():
            raise PermissionError(f"a client of uid {uid} is not served")
        server.send_message(conn, {"ready": os.getpid()})
        request, fds = server.recv_message(conn, with_fds=True)
        done, said = os.pipe()  # the command's exit status, said before its process is gone
        pid = os.fork()
        if pid == 0:
            conn.close()
            os.close(done)
            _command(request, fds, said)
        os.close(said)
        for fd in fds:
            os.close(fd)
        try:
            server.send_message(conn, {"pid": pid})
        except OSError:  # the client gave up waiting and runs the command itself
            os.kill(pid, signal.SIGKILL)
            raise
        print(f"{time.strftime('%F %T')} pid {pid}: modelplan {' '.join(request['argv'])}",
              flush=True)
        code = _relay(conn, pid, done)
        with contextlib.suppress(OSError):
            server.send_message(conn, {"exit": code})
        conn.close()
        with contextlib.suppress(ChildProcessError):  # reaped here, not left to init
            os.waitpid(pid, 0)
        code = 0
    except BaseException:  # noqa: BLE001 - the client falls back or reports; the log says why
        traceback.print_exc()
    finally:
        os._exit(code)


def _relay(conn: socket.socket, pid: int, done: int) -> int:
    """Forward the client's signals to `pid` until it says its exit status on `done` or exits;
    its exit status (128 + N when signal N ended it)."""
    pidfd = os.pidfd_open(pid)
    watching = [conn, pidfd, done]
    while True:
        ready, _, _ = _select(watching, 3600)
        if conn in ready:
            try:
                message, _ = server.recv_message(conn)
                os.kill(pid, int(message["signal"]))
            except (EOFError, OSError, KeyError, ValueError):
                watching.remove(conn)  # the client went away: interrupt the command
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGINT)
        if done in ready:
            said = os.read(done, 16)
            if said:
                return int(said)
            watching.remove(done)  # it ended before saying: its wait status says how
        if pidfd in ready:
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            return 128 - code if code < 0 else code


def _command(request: dict[str, Any], fds: list[int], said: int) -> None:
    """The command's process: the client's fds, cwd and environment; then the CLI's main.
    When it is done it closes its files (the client's streams, the store's locks) and says
    its exit status on `said`: the client need not wait while the kernel frees its memory."""
    code = 1
    try:
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        for name, value in _SET_ON_IMPORT.items():  # as the imports would set them here
            os.environ.setdefault(name, value)
        tempfile.tempdir = None  # TMPDIR is read again
        composecache.enable(_share)
        os.chdir(request["cwd"])
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _reopen_stdio()
        code = _main(request["argv"])
    except BaseException:  # noqa: BLE001 - a failure of the server's own part
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            atexit._run_exitfuncs()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os.closerange(0, said)
        os.closerange(said + 1, os.sysconf("SC_OPEN_MAX"))
        with contextlib.suppress(OSError):
            os.write(said, str(code & 0xFF).encode())
        os._exit(code)


def _reopen_stdio() -> None:
    """sys.stdin/stdout/stderr over the client's fds, buffered as Python buffers a terminal
    or a pipe (line by line on a terminal)."""
    def stream(fd: int, mode: str, line: bool) -> Any:
        return io.TextIOWrapper(io.open(fd, mode + "b", closefd=False, buffering=-1),  # noqa: UP020
                                encoding="utf-8", errors="backslashreplace" if fd == 2 else
                                "strict", line_buffering=line, write_through=fd == 2)

    sys.stdin = sys.__stdin__ = stream(0, "r", False)
    sys.stdout = sys.__stdout__ = stream(1, "w", os.isatty(1))
    sys.stderr = sys.__stderr__ = stream(2, "w", True)


def _main(argv: list[str]) -> int:
    from planner.cli import main

    server.serving = True
    main.T0 = time.perf_counter()
    sys.argv = ["modelplan", *argv]
    try:
        return main.main(argv)
    except SystemExit as exc:  # argparse's usage errors (2), --help (0)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return exc.code or 0
    except KeyboardInterrupt:
        print("modelplan: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    os.chdir("/")  # the server holds no directory; each command takes its client's
    sys.exit(serve(sys.argv[1]) if len(sys.argv) == 2 else 2)
