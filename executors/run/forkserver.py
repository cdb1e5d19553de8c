"""Run a step's `apply_step` in another process, so that a crash in native code (a segfault in
a runtime, the kernel's OOM killer) ends that process only: the parent reports `killed by
signal N` naming the step, removes its temporary output and goes on.

Which steps run there is declared: ops with `Trait.HEAVY` (planner/core/ops.py). The processes are
forked by multiprocessing's fork server, which imports the libraries the run's heavy steps use
once (`preload`), so a process starts warm: the cost is a fork, not an interpreter start and
its imports (a build server's command forks it from itself, already warm:
executors/run/warmfork.py). The local runner's are long-lived warm workers, each running several steps
(executors/run/workers.py); a Ray task gives each step a fresh child (`apply_in_child`). `modelplan run` starts the server before the plan is made (`warm_up`); the plan keeps
it only if it has torch steps to run, so a fully cached run stops it and starts no worker.

The process sends progress lines and then the step's outcome over a pipe: its metrics, or its
error (a StepError's message; any other exception's type, message, errno and traceback), and
its peak RSS during the step, which is the step's peak RSS. It ignores SIGINT (the parent
decides what an interrupt does), is named `mp:<step id>` for ps and top while it runs that
step, and dies with the fork server, which exits when the parent does.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executors.run import childproc, warmfork
from planner.core.ops import OPS, Trait
from planner.errors import StepError

if TYPE_CHECKING:
    from executors.run.monitor import StepMonitor
    from executors.run.step_api import StepContext, StepResult

# What a step that uses a tool (Op.tools) imports first; torch steps load their models through
# transformers, whose modeling code is the larger share of that import.
TOOL_MODULES: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "transformers.modeling_utils"),
    "transformers": ("transformers",),
    "onnx": ("onnx",),
    "onnxruntime": ("onnxruntime",),
    "onnxruntime-qnn": ("onnxruntime_qnn",),
}
SLOW_TOOLS = ("torch",)  # seconds of imports (with transformers' modeling code)
BASE_PRELOAD = ("executors.run.wrapper",)
_PRELOAD: set[str] = set(BASE_PRELOAD)
_warm = False  # the running fork server was started by warm_up, before the plan was known
_served: tuple[int, frozenset[str]] | None = None  # the running server's pid and its imports
_LIVE: dict[int, Any] = {}  # pid -> a running child's or worker's Process

OOM_FIX = ("the kernel's OOM killer ends the largest process when memory runs out: free memory "
           "or run fewer jobs at once (-j 1), then run again")
REPORT_FIX = "run again; if it repeats, report it with the step's input"
SIGNAL_CAUSES = {  # signal -> (likely cause, fix)
    signal.SIGKILL: ("out of memory?", OOM_FIX),
    signal.SIGSEGV: ("a crash in native code", REPORT_FIX),
    signal.SIGABRT: ("a native library aborted", REPORT_FIX),
    signal.SIGBUS: ("a bad memory access: a truncated file, or a full /dev/shm?",
                    "check free space, then run again"),
}


class ChildError(Exception):
    """An exception raised in the child, carried to the parent by type name and message."""

    def __init__(self, type_name: str, message: str, child_traceback: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.add_note(f"in the step's process:\n{child_traceback}")


def warm_up() -> None:
    """Start the fork server before the plan is made, importing what any heavy step uses
    (torch and transformers take seconds), so that those imports overlap with composing and
    planning. The plan then decides (`preload`): a plan with steps using a slow tool keeps the
    server; any other plan stops it, so a fully cached run leaves no process behind and a plan
    of ONNX steps does not wait for torch. Whatever is left is stopped at exit. A server that
    cannot start now (no processes or file descriptors left) is left to the plan to start."""
    global _warm
    tools = _all_heavy_tools()
    if _server_pid() is not None and _modules(tools, SLOW_TOOLS) <= _server_imports():
        return  # an earlier run in this process started one that has torch
    if warmfork.imported():  # forked warm when a step needs it: no imports to overlap
        return
    try:
        preload(tools, start=True)
    except OSError:
        stop_server()
        return
    _warm = True
    atexit.register(stop_server)


def stop_server() -> None:
    """Stop the fork server now, even in the middle of its imports; the next
    `preload(start=True)` starts a new one. Not while a worker or child runs (they die with
    the server): then it is left to exit with this process."""
    global _warm
    from multiprocessing import forkserver

    if _LIVE:
        return
    _warm = False
    _PRELOAD.clear()
    _PRELOAD.update(BASE_PRELOAD)
    pid = _server_pid()
    if pid is None:
        return
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with suppress(ChildProcessError):  # already reaped
        forkserver._forkserver._stop()  # the stdlib has no public stop: closes its pipe, reaps it


def _server_pid() -> int | None:
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def preload(tools: Any, start: bool = False) -> None:
    """Let the fork server import what steps using `tools` need. Only calls made before the
    process's first heavy step count: the server imports once, when it starts. start: start it
    now, so that its imports overlap with what this process does before its first heavy step.
    A server `warm_up` started is kept only if `tools` include a slow one."""
    global _warm
    if _warm and not set(SLOW_TOOLS) & set(tools):
        stop_server()
    _warm = False
    if not _modules(tools, SLOW_TOOLS) <= _server_imports() and not _LIVE:
        # an earlier plan in this process started it without torch: each step would import it
        # itself (seconds each); a server started now imports it once (a quick module a step
        # imports itself)
        stop_server()
    _PRELOAD.update(_modules(tools))
    if start:
        from multiprocessing import forkserver

        _context()
        if warmfork.can_fork(_PRELOAD):  # this process imported them: fork it, warm
            warmfork.fork_server(_PRELOAD)
        else:
            forkserver.ensure_running()
        _note_server()


def import_tools() -> None:
    """Import here what any heavy step imports, for a process that forks others to run
    commands (the build server): their fork servers are then forked warm (executors/run/
    warmfork.py), not started as interpreters that import torch again."""
    warmfork.import_modules(sorted(_PRELOAD | _modules(_all_heavy_tools())))


def _all_heavy_tools() -> list[str]:
    """The tools any heavy step uses."""
    return sorted({t for op in OPS.values() if op.has(Trait.HEAVY) for t in op.tools})


def _modules(tools: Any, among: Any = None) -> set[str]:
    """What steps using `tools` import first (only the tools in `among`, when given)."""
    return {m for t in tools if among is None or t in among for m in TOOL_MODULES.get(t, ())}


def _server_imports() -> frozenset[str]:
    """What the running fork server imported when it started (nothing: none runs)."""
    pid = _server_pid()
    if pid is None:
        return frozenset()
    if _served is not None and _served[0] == pid:
        return _served[1]
    return frozenset(BASE_PRELOAD)  # started where it was not noted: the least it imports


def _context() -> Any:
    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(sorted(_PRELOAD))  # no effect once the server runs
    return mp


def _note_server() -> None:
    """Remember what the fork server that now runs was started with."""
    global _served
    pid = _server_pid()
    if pid is not None and (_served is None or _served[0] != pid):
        _served = (pid, frozenset(_PRELOAD))


def heavy_tools(steps: Any) -> list[str]:
    """The tools of the plan steps (dicts) that will run, in child processes."""
    return sorted({t for s in steps if s["action"] == "run" and OPS[s["op"]].has(Trait.HEAVY)
                   for t in OPS[s["op"]].tools})


def apply_in_child(ctx: StepContext, mon: StepMonitor) -> StepResult:
    """`apply_step(ctx)` in a fresh child process; its errors are raised here as they were
    there. (A local run's warm workers do the same for many steps: executors/run/workers.py.)"""
    mp = _context()
    reader, writer = mp.Pipe(duplex=False)
    proc = mp.Process(target=_child_main, args=(writer, spec(ctx)), name=f"modelplan-{ctx.id}")
    with _standard_start_method():
        proc.start()
    _note_server()
    writer.close()
    _LIVE[proc.pid] = proc
    try:
        mon.watch(proc.pid)
        got = outcome(reader, proc, ctx)
        proc.join()
    finally:
        if proc.exitcode is None:  # interrupted, or the parent failed: the child goes too
            proc.kill()
            proc.join()
        forget(proc)
        reader.close()
    if got is None:
        raise died(ctx, proc.exitcode)
    status, payload, peak_mb = got
    mon.report(peak_mb)
    if status == "ok":
        return result(payload)
    raise rebuilt(payload)


def spec(ctx: StepContext) -> dict[str, Any]:
    """What the other process needs of a step's context (plain data)."""
    return {"step": ctx.step, "inputs": {r: str(p) for r, p in ctx.inputs.items()},
            "out": str(ctx.out), "cache_dir": str(ctx.cache_dir) if ctx.cache_dir else None,
            "blobs": str(ctx.blobs) if ctx.blobs else None}


def result(metrics: dict[str, Any]) -> StepResult:
    from executors.run.step_api import StepResult

    return StepResult(metrics=metrics)


def start_worker(name: str) -> tuple[Any, Connection]:
    """A new warm worker, forked by the fork server: its process and its end of the pipe."""
    mp = _context()
    ours, theirs = mp.Pipe(duplex=True)
    proc = mp.Process(target=_worker_main, args=(theirs,), name=f"modelplan-{name}")
    with _standard_start_method():
        proc.start()
    _note_server()
    theirs.close()
    _LIVE[proc.pid] = proc
    return proc, ours


def forget(proc: Any) -> None:
    _LIVE.pop(proc.pid, None)


@contextmanager
def _standard_start_method() -> Iterator[None]:
    """A child is told the parent's default start method; one the standard library does not
    know (joblib's `loky`, in a Hydra joblib job) would stop it before it starts."""
    saved = multiprocessing.get_start_method(allow_none=True)
    if saved in (None, *multiprocessing.get_all_start_methods()):
        yield
        return
    multiprocessing.set_start_method("forkserver", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(saved, force=True)


def kill_all() -> None:
    """Kill every running child at once (a second interrupt: exit now)."""
    for proc in list(_LIVE.values()):
        try:
            proc.kill()
        except (OSError, ValueError):
            pass


def outcome(reader: Connection, proc: Any, ctx: StepContext) -> tuple | None:
    """Relay a child's or worker's progress lines until its step's outcome arrives; None if
    it died without one."""
    while True:
        ready = wait([reader, proc.sentinel])
        if reader not in ready and not reader.poll():
            return None
        try:
            message = reader.recv()
        except (EOFError, OSError):  # it died (a reset if it died before reading all we sent)
            return None
        if message[0] != "progress":
            return message
        ctx.progress(message[1])


def died(ctx: StepContext, exitcode: int | None) -> StepError:
    where = f"step {ctx.id} ({ctx.step['op']})"
    if exitcode is not None and exitcode < 0:
        sig = signal.Signals(-exitcode)
        cause, fix = SIGNAL_CAUSES.get(sig, ("", "run again"))
        return StepError(f"{where} was killed by signal {-exitcode} ({sig.name}"
                         f"{'; ' + cause if cause else ''}); its partial output was removed; "
                         f"{fix}")
    return StepError(f"{where}: its process exited with status {exitcode} without a result; "
                     "its partial output was removed; rerun with --debug and report it")


def rebuilt(error: dict[str, Any]) -> Exception:
    if error["kind"] == "step":
        return StepError(error["message"])
    if error["errno"] is not None:  # an OSError keeps its errno: disk full is recognised by it
        exc: Exception = OSError(error["errno"], error["message"], error.get("filename"))
        exc.add_note(f"in the step's process:\n{error['traceback']}")
        return exc
    return ChildError(error["type"], error["message"], error["traceback"])


# -- in the child ------------------------------------------------------------------------
def _child_main(conn: Connection, spec: dict[str, Any]) -> None:
    childproc.set_up(spec["step"]["id"])
    conn.send(_run(conn, spec))
    conn.close()


def _worker_main(conn: Connection) -> None:
    """Run the steps the parent sends, one at a time, until it closes the pipe."""
    childproc.set_up("idle")
    start_mb = childproc.rss_mb()
    while True:
        try:
            step = conn.recv()
        except (EOFError, OSError):
            return
        childproc.name(step["step"]["id"])
        childproc.reset_peak()
        status, payload, peak_mb = _run(conn, step)
        childproc.name("idle")  # before the outcome: `mp:<step>` is running that step, never idle
        conn.send((status, payload, peak_mb, childproc.rss_mb(), start_mb))


def _run(conn: Connection, spec: dict[str, Any]) -> tuple:
    """Run one step here: ("ok", metrics, peak MB) or ("failed", error payload, peak MB)."""
    from executors.run.step_api import StepContext
    from executors.run.wrapper import apply_step

    ctx = StepContext(spec["step"], {r: Path(p) for r, p in spec["inputs"].items()},
                      Path(spec["out"]), lambda line: conn.send(("progress", line)),
                      Path(spec["cache_dir"]) if spec["cache_dir"] else None,
                      Path(spec["blobs"]) if spec["blobs"] else None)
    try:
        return ("ok", apply_step(ctx).metrics, childproc.peak_mb())
    except StepError as exc:
        return ("failed", {"kind": "step", "message": str(exc)}, childproc.peak_mb())
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        return ("failed", _payload(exc), childproc.peak_mb())


def _payload(exc: BaseException) -> dict[str, Any]:
    """An exception as plain data; an OSError keeps its errno and file name."""
    os_error = exc if isinstance(exc, OSError) else None
    return {"kind": "error", "type": type(exc).__name__,
            "message": (os_error.strerror if os_error else None) or str(exc),
            "errno": os_error.errno if os_error else None,
            "filename": str(os_error.filename) if os_error and os_error.filename else None,
            "traceback": traceback.format_exc()}
