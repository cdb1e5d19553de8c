"""executor=ray on a two-node Ray cluster on this machine (tests/integration/raycluster.py): a
head started with `--resources '{"qnn_htp": 1}'` and a worker without it. Device steps run only
on the head; a step asking for what no node has, and a node that cannot see the store, fail
at start; Ctrl-C on the driver cancels its tasks and leaves the store clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from planner.core.ops import OPS, Trait
from tests.conftest import ROOT
from tests.integration.conftest import QNN_RUN
from tests.integration.raycluster import TwoNodes, ray_env

# One Ray at a time: each starts its own on this machine (xdist runs the group on one worker).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

NODES = ("import json, logging, ray\n"
         "ray.init(address='{address}', log_to_driver=False, logging_level=logging.ERROR)\n"
         "print(json.dumps({{n['NodeID']: n['Resources'] for n in ray.nodes() if n['Alive']}}))\n")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    hidden = tmp_path_factory.mktemp("hidden-on-worker")
    nodes = TwoNodes(hidden_on_worker=hidden).start()
    yield nodes
    nodes.stop()


def in_cluster(nodes: TwoNodes, *args: str) -> subprocess.CompletedProcess[str]:
    """A driver process in the cluster's network namespace."""
    return subprocess.run(nodes.enter(sys.executable, *args, pid_ns=False), capture_output=True,
                          text=True, cwd=ROOT, env=nodes.env(), timeout=900, check=False)


def ray_run(nodes: TwoNodes, store: Path, outputs: Path, *extra: str,
            address: str | None = None) -> subprocess.CompletedProcess[str]:
    return in_cluster(nodes, "-m", "planner.cli.main", "run", *QNN_RUN, "executor=ray",
                      f"executor.address={address or nodes.address}", *extra, "--store",
                      str(store), "--outputs", str(outputs), "--json")


def errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("modelplan: error:")]


@pytest.mark.parametrize("client", [False, True], ids=["driver-on-a-node", "ray-client"])
def test_device_steps_run_only_on_the_node_with_the_device(cluster: TwoNodes, tmp_path: Path,
                                                           client: bool) -> None:
    address = "ray://127.0.0.1:10001" if client else cluster.address
    result = ray_run(cluster, tmp_path / "store", tmp_path / "out", address=address)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    nodes = json.loads(in_cluster(cluster, "-c", NODES.format(address=cluster.address)).stdout)
    head = {n for n, have in nodes.items() if have.get("qnn_htp")}
    assert len(nodes) == 2 and len(head) == 1
    for s in record["steps"]:
        assert s["node"]["id"] in nodes and s["node"]["ip"] == "127.0.0.1"
        if OPS[s["op"]].has(Trait.NEEDS_EP):
            assert s["node"]["id"] in head, s["id"]
    assert {s["op"] for s in record["steps"] if s["node"]["id"] in head} >= {
        "compile", "verify", "perf"}
    assert all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")) for a in cluster.listening())


def test_what_no_node_has_fails_at_start_naming_it(cluster: TwoNodes, tmp_path: Path) -> None:
    result = ray_run(cluster, tmp_path / "store", tmp_path / "out",
                     "+executor.resources.export.big_ram=1",
                     "+executor.resources.compile.qnn_htp=2")
    assert result.returncode == 2, result.stderr
    lines = errors(result)
    assert len(lines) == 2 and "Traceback" not in result.stderr
    assert "has big_ram=1, which step(s) export ask for" in lines[0]
    assert "has qnn_htp=2, which step(s) compile ask for" in lines[1]
    assert all("nothing was run" in line and "ray start" in line for line in lines)
    assert """--resources '{"big_ram": 1}'""" in lines[0]
    assert not list((tmp_path / "store").glob("??/*"))


def test_a_node_that_cannot_see_the_store_fails_at_start(cluster: TwoNodes) -> None:
    assert cluster.hidden is not None
    store = cluster.hidden / "store"
    result = ray_run(cluster, store, cluster.hidden / "out")
    assert result.returncode == 2, result.stderr
    lines = errors(result)
    assert len(lines) == 1 and f"cannot see the store {store}" in lines[0]
    assert "mount it at that path on every node" in lines[0]
    assert not list(store.glob("??/*")) and not list((store / "tmp").iterdir())


def test_ctrl_c_cancels_the_tasks_and_leaves_the_store_clean(tmp_path: Path) -> None:
    """A Ray of the run's own (executor.address=null); Ctrl-C reaches the whole process group,
    as from a terminal, while a step is mid-build."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-m", "planner.cli.main", "run", *QNN_RUN, "executor=ray", "--store",
         str(store), "--outputs", str(tmp_path / "out")],
        cwd=ROOT, env={**os.environ, **ray_env()}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 300
    while not any((store / "tmp").glob("*.*.*")) if (store / "tmp").is_dir() else True:
        assert time.time() < deadline and proc.poll() is None, "no step started"
        time.sleep(0.01)
    ray_processes = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]  # as on the local executor: the record names the step
    assert last.startswith("modelplan: error: step ") and "interrupted by SIGINT" in last, err
    assert len(list((store / "runs").glob("*.json"))) == 1
    assert list((store / "tmp").iterdir()) == []
    assert all((entry / "manifest.json").is_file() for entry in store.glob("??/*"))
    time.sleep(1)
    assert not [p.pid for p in ray_processes if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
