"""Real Ray clusters for tests, on this machine and on loopback only.

* `local_ray_env()`: the environment for an in-process `ray.init` (one node bound to
  127.0.0.1, no usage stats, token auth with a token of the test session, not ~/.ray's).
* `TwoNodes`: a head started with `ray start --head --resources '{"qnn_htp": 1}'` and a
  worker started with `ray start --address ...`, each with its own temp dir, inside a network
  namespace that has only loopback (Ray resolves 127.0.0.1 to the machine's address for
  multi-node clusters; in that namespace there is no other address to listen on) and a PID
  namespace, so ending the one process this test started ends every Ray process of the cluster.
  The worker node can be given a private mount namespace in which one directory is hidden
  (a node that cannot see part of the shared filesystem).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
TOKEN = uuid.uuid4().hex


def ray_env() -> dict[str, str]:
    return {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}


def local_ray_env() -> dict[str, str]:
    return {**ray_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def short_tmp(prefix: str) -> Path:
    """A short temp dir: Ray's unix socket paths must stay under 107 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


class TwoNodes:
    PORT = 6379   # inside the cluster's own network namespace: no clash with anything else

    def __init__(self, hidden_on_worker: Path | None = None) -> None:
        self.tmp = short_tmp("mpray-")
        self.hidden = hidden_on_worker
        self.holder: subprocess.Popen[bytes] | None = None
        self.ns_pid = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.PORT}"

    def env(self) -> dict[str, str]:
        return {**os.environ, **ray_env()}

    def enter(self, *args: str, pid_ns: bool = True) -> list[str]:
        """A command run inside the cluster's namespaces (network only, for a driver)."""
        flags = ["-n", "-p", "-m"] if pid_ns else ["-n"]
        return ["nsenter", "-t", str(self.ns_pid), *flags, "--", *args]

    def start(self) -> TwoNodes:
        self.holder = subprocess.Popen(
            ["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child",
             "sh", "-c", "ip link set lo up && exec sleep 86400"])
        self.ns_pid = self._namespace_init()
        head = [RAY, "start", "--head", f"--port={self.PORT}", "--num-cpus=1",
                '--resources={"qnn_htp": 1}', f"--temp-dir={self.tmp / 'h'}",
                "--include-dashboard=false", "--disable-usage-stats",
                "--object-store-memory=100000000"]
        self._run(self.enter(*head))
        worker = [RAY, "start", f"--address={self.address}", "--num-cpus=1",
                  f"--temp-dir={self.tmp / 'w'}", "--disable-usage-stats",
                  "--object-store-memory=100000000"]
        if self.hidden is not None:  # its own mount namespace, the directory under a tmpfs
            worker = ["unshare", "--mount", "sh", "-c",
                      f"mount -t tmpfs none {self.hidden} && exec \"$@\"", "sh", *worker]
        self._run(self.enter(*worker))
        return self

    def _namespace_init(self) -> int:
        assert self.holder is not None
        deadline = time.time() + 30
        while time.time() < deadline:
            kids = Path(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children")
            pids = kids.read_text().split() if kids.exists() else []
            if pids and self._lo_up(int(pids[0])):
                return int(pids[0])
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the cluster's network namespace did not come up (needs root, "
                           "unshare, nsenter and ip)")

    @staticmethod
    def _lo_up(pid: int) -> bool:
        out = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show", "lo"],
                             capture_output=True, text=True, check=False).stdout
        return "UP" in out.split("mtu")[0]

    def _run(self, cmd: list[str]) -> None:
        result = subprocess.run(cmd, capture_output=True, text=True, env=self.env(), timeout=300,
                                check=False)
        if result.returncode != 0:
            self.stop()
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout[-2000:]}"
                               f"\n{result.stderr[-2000:]}")

    def listening(self) -> list[str]:
        """Local addresses of every listening TCP socket in the cluster's network namespace."""
        out = subprocess.run(["nsenter", "-t", str(self.ns_pid), "-n", "ss", "-Hltn"],
                             capture_output=True, text=True, check=True).stdout
        return [line.split()[3] for line in out.splitlines() if line.strip()]

    def stop(self) -> None:
        """End the namespace's first process: the kernel then ends every process inside."""
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()  # unshare ignores SIGTERM while it waits; --kill-child does the rest
            self.holder.wait()
        if self.ns_pid:
            deadline = time.time() + 30
            while Path(f"/proc/{self.ns_pid}").exists() and time.time() < deadline:
                time.sleep(0.05)
        shutil.rmtree(self.tmp, ignore_errors=True)
