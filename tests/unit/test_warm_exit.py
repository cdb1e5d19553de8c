"""A process that imported the tools on purpose (the build server, executors/run/warmfork.py)
lets the processes forked from it exit without torch undoing its operator registrations one by
one, while every other exit handler still runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT


def test_a_warm_process_forks_children_that_exit_without_undoing_the_imports() -> None:
    script = textwrap.dedent("""
        import atexit, gc, os, weakref
        from executors.run import forkserver
        forkserver.import_tools()
        import torch.library
        undo = [f for f in gc.get_objects() if type(f) is weakref.finalize
                and f.peek() is not None and f.peek()[1] is torch.library._del_library]
        assert undo, "torch registered no operator library"
        assert not [f for f in undo if f.atexit], "torch still undoes its libraries at exit"
        r, w = os.pipe()
        if os.fork() == 0:  # as the server's command processes end
            atexit.register(lambda: os.write(w, b"ran"))
            atexit._run_exitfuncs()
            os._exit(0)
        os.close(w)
        os.wait()
        assert os.read(r, 16) == b"ran", "an exit handler of the child did not run"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.stdout == "ok\n", done.stderr
