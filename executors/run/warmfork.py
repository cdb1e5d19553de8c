"""A fork server forked from a warm process instead of started as a new interpreter.

multiprocessing starts its fork server as a fresh interpreter that imports the preload modules
(torch and transformers: seconds). A process that has already imported them on purpose
(`import_modules`: the build server, planner/cli/serve.py, before it forks one process per
command) can fork the fork server from itself instead: the same server loop
(`multiprocessing.forkserver.main`) with nothing left to import, so a command's first heavy
step starts warm. The fork is made only while this process runs one thread, and the child
keeps only the fork server's own file descriptors and stdio.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import socket
import sys
import threading
import weakref
from contextlib import suppress

_imported = False  # import_modules ran here (or in the process this one was forked from)


def import_modules(modules: list[str]) -> None:
    """Import `modules` now, and let later fork servers of this process (and of the processes
    forked from it) be forked from it."""
    global _imported
    for name in modules:
        with suppress(ImportError):
            importlib.import_module(name)
    _imported = True
    _exit_without_undoing_imports()


def _exit_without_undoing_imports() -> None:
    """Let the processes forked from this one exit without undoing what the imports did: torch
    deregisters each operator library at exit (one finalizer each) and logs dynamo's compile
    times, 50 ms of a command's exit that frees nothing the kernel does not."""
    library = sys.modules.get("torch.library")
    if library is not None:
        for obj in gc.get_objects():
            if type(obj) is weakref.finalize and obj.atexit:  # no isinstance: no __class__ calls
                found = obj.peek()
                if found is not None and found[1] is library._del_library:
                    obj.atexit = False
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is not None:
        atexit.unregister(dynamo.dump_compile_times)


def imported() -> bool:
    """Whether this process (or the one it was forked from) imported the tools on purpose."""
    return _imported


def can_fork(preload: set[str]) -> bool:
    """Whether a fork server with `preload` can be forked from this process now."""
    from multiprocessing import forkserver

    return (_imported and forkserver._forkserver._forkserver_pid is None
            and threading.active_count() == 1 and all(m in sys.modules for m in preload))


def fork_server(preload: set[str]) -> None:
    """Start multiprocessing's fork server as a fork of this process, as `ensure_running`
    would start it (a listening socket, an `alive` pipe whose end is ours)."""
    from multiprocessing import connection, forkserver, resource_tracker, util

    state = forkserver._forkserver
    resource_tracker.ensure_running()
    address = connection.arbitrary_address("AF_UNIX")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    if not util.is_abstract_socket_namespace(address):
        os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _close_all_but({0, 1, 2, listener.fileno(), alive_r})
            forkserver.main(listener.fileno(), alive_r, sorted(preload))
        finally:
            os._exit(0)
    os.close(alive_r)
    listener.close()
    state._forkserver_address = address
    state._forkserver_alive_fd = alive_w
    state._forkserver_pid = pid


def _close_all_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with suppress(OSError):
                os.close(fd)
