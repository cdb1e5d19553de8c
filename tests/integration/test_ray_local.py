"""executor=ray on a real Ray started in this process (`ray.init(num_cpus=2)`, with 2 units
of qnn_htp: the HTP simulator runs on these cores): a tiny_bert build with the same results
as the local executor, a 4-job sweep, a killed worker, a failing step, and loopback only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import psutil
import pytest

from executors.onnx.artifacts import FACTS_KEY
from executors.store.content import Store
from planner.cli.app import RunOptions, run_plan, run_sweep
from planner.core.ops import OPS, Trait
from planner.planning import plan_from_overrides, plan_sweep
from tests.conftest import run_cli
from tests.integration.conftest import CPU_RUN, QNN_RUN, step
from tests.integration.raycluster import local_ray_env, short_tmp
from tests.integration.test_store_safety import _reseal
from tests.integration.test_sweep import SWEEP

# One Ray at a time: each starts its own on this machine (xdist runs the group on one worker).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    saved = {k: os.environ.get(k) for k in local_ray_env()}
    os.environ.update(local_ray_env())
    import ray

    temp = short_tmp("mpray-")
    ray.init(num_cpus=2, resources={"qnn_htp": 2}, include_dashboard=False, log_to_driver=False,
             _temp_dir=str(temp), object_store_memory=100_000_000, logging_level="ERROR")
    yield ray
    ray.shutdown()
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    shutil.rmtree(temp, ignore_errors=True)


def ray_run(overrides: tuple[str, ...], store: Path, outputs: Path,
            **executor: Any) -> dict[str, Any]:
    """`modelplan run OVERRIDES executor=ray` in this process, on the Ray it is connected to."""
    ir = plan_from_overrides([*overrides, "executor=ray"], store=str(store)).to_json()
    return run_plan(ir, outputs, list(overrides), RunOptions(store=store, quiet=True,
                                                             executor=executor))


@pytest.fixture(scope="module")
def same_plan(local_ray: Any, qnn_run: dict[str, Any],
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same tiny_bert QNN HTP plan built by both executors, each from an empty store (the
    local build is the session's, test_qnn's)."""
    local = qnn_run
    store, outputs = tmp_path_factory.mktemp("same-ray-store"), tmp_path_factory.mktemp("o")
    record = ray_run(QNN_RUN, store, outputs / "run")
    assert record["status"] == "ok", record["error"]
    return {"local": local["record"], "ray": record, "store": store, "outputs": outputs}


def test_same_keys_digests_and_records_as_the_local_executor(same_plan: dict[str, Any]) -> None:
    local, ray = same_plan["local"], same_plan["ray"]
    assert ray["executor"] == "ray" and local["executor"] == "local"
    assert set(ray) == set(local)
    assert [(s["id"], s["op"], s["key"], s["action"], s["status"]) for s in ray["steps"]] == \
        [(s["id"], s["op"], s["key"], s["action"], s["status"]) for s in local["steps"]]
    for a, b in zip(local["steps"], ray["steps"], strict=True):
        # where a step ran: Ray's node, or the local run's warm worker (for a heavy step)
        assert set(b) - set(a) == {"node"} and set(a) - {"worker"} <= set(b)
        assert ("worker" in a) == (a["action"] == "run" and OPS[a["op"]].has(Trait.HEAVY))
        assert sorted(b["outputs"]) == sorted(a["outputs"])
        if OPS[a["op"]].has(Trait.ENCAPSULATES):  # QNN's context binary is not deterministic
            assert a["action"] == b["action"] == "run"
            model = onnx.load(b["outputs"]["model.onnx"], load_external_data=False)
            onnx.checker.check_model(model)
            assert [n.op_type for n in model.graph.node] == ["EPContext"]
        else:
            assert b["digests"] == a["digests"], a["id"]
    assert step(ray, "verify")["metrics"]["passed"] is True
    assert sorted(ray["published"]) == sorted(local["published"])


def test_every_step_records_its_node_and_devices_ran_where_declared(
        same_plan: dict[str, Any], local_ray: Any) -> None:
    node = local_ray.get_runtime_context().get_node_id()
    assert {s["node"]["id"] for s in same_plan["ray"]["steps"]} == {node}
    saved = json.loads((same_plan["outputs"] / "run" / "run.json").read_text())
    assert saved["steps"] == same_plan["ray"]["steps"]
    assert Store(same_plan["store"]).runs()[-1]["run_id"] == saved["run_id"]


def test_a_cached_rerun_builds_nothing(same_plan: dict[str, Any], tmp_path: Path) -> None:
    again = ray_run(QNN_RUN, same_plan["store"], tmp_path / "again")
    actions = Counter(s["action"] for s in again["steps"])
    assert again["status"] == "ok"
    # every step but perf (which measures every time) and the elided optimize, fix_shapes too
    assert actions == {"cached": 9, "elided": 1, "run": 1}
    assert step(again, "perf")["action"] == "run"


def test_four_job_sweep_builds_each_key_once(local_ray: Any, tmp_path: Path) -> None:
    sweep = plan_sweep([*SWEEP, "executor=ray"], store=str(tmp_path / "store"))
    summary = run_sweep(sweep, tmp_path / "sweep", RunOptions(store=tmp_path / "store",
                                                               quiet=True))
    assert summary["executor"] == "ray"
    assert [j["status"] for j in summary["jobs"]] == ["ok"] * 4
    exports = [s for s in summary["steps"] if s["op"] == "export"]
    assert len(exports) == 1 and exports[0]["jobs"] == [0, 1, 2, 3]
    built_keys = Counter(s["key"] for s in summary["steps"] if s["action"] == "run")
    assert built_keys and max(built_keys.values()) == 1
    for job in summary["jobs"]:
        assert all("node" in s for s in job["record"]["steps"] if s["status"] == "ok")
    assert (tmp_path / "sweep" / "results.csv").is_file()


def _kill_first_builder(store: Path, killed: list[str], stop: threading.Event) -> None:
    """SIGKILL the worker building the first store entry we catch mid-build."""
    tmp = store / "tmp"
    while not stop.is_set() and not killed:
        for path in tmp.glob("*.*.*") if tmp.is_dir() else []:
            key, pid = path.name.split(".")[:2]
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            with_pid = psutil.Process(int(pid))
            if "ray::" not in " ".join(with_pid.cmdline()):
                continue
            os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.3)
            if path.exists():  # killed mid-build: the worker could not clean up
                killed.append(key)
                return
        time.sleep(0.01)


def test_a_killed_worker_is_retried_and_leaves_no_half_entry(local_ray: Any,
                                                             tmp_path: Path) -> None:
    store = tmp_path / "store"
    killed: list[str] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_first_builder, args=(store, killed, stop))
    killer.start()
    try:
        record = ray_run(QNN_RUN, store, tmp_path / "out", retries=2)
    finally:
        stop.set()
        killer.join()
    assert killed, "no step was caught mid-build"
    assert record["status"] == "ok", record["error"]
    assert killed[0] in {s["key"] for s in record["steps"] if s["action"] == "run"}
    assert list((store / "tmp").iterdir()) == []  # the killed build dir was discarded
    assert run_cli("store", "verify", "--store", str(store)).returncode == 0


def test_a_failing_step_keeps_its_own_error_and_is_retried_as_configured(
        same_plan: dict[str, Any], tmp_path: Path) -> None:
    local = run_cli("run", *QNN_RUN, "verify.threshold=1.0", "--store",
                    str(same_plan["store"]), "--outputs", str(tmp_path / "lo"), "--json")
    own = step(json.loads(local.stdout), "verify")["error"]
    once = ray_run((*QNN_RUN, "verify.threshold=1.0"), same_plan["store"], tmp_path / "a")
    assert once["status"] == "failed" and once["error"]["step"] == "verify"
    assert step(once, "verify")["error"] == own  # the step's own words, not Ray's
    twice = ray_run((*QNN_RUN, "verify.threshold=1.0"), same_plan["store"], tmp_path / "b",
                    step_retries=1)
    assert step(twice, "verify")["error"] == f"{own} (failed 2 times: executor.step_retries=1)"
    assert step(twice, "perf")["status"] == "skipped"  # after the failed gate, as locally


def test_nothing_listens_beyond_loopback(local_ray: Any) -> None:
    me = psutil.Process()
    listening = [c.laddr.ip for p in [me, *me.children(recursive=True)]
                 for c in _connections(p) if c.status == psutil.CONN_LISTEN]
    assert listening  # Ray's servers are there
    assert all(ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1") for ip in listening), listening


def _connections(proc: psutil.Process) -> list[Any]:
    try:
        return proc.net_connections(kind="inet")
    except psutil.Error:
        return []


def test_a_proof_that_fails_on_the_real_input_rekeys_step_by_step(local_ray: Any,
                                                                 tmp_path: Path) -> None:
    """normalize's entry holds the raw export under a stamp claiming `normalized` (as in
    test_store_safety): the elided optimize runs after all and what follows is re-keyed."""
    store = tmp_path / "store"
    first = ray_run(CPU_RUN, store, tmp_path / "a")
    normalized = Path(step(first, "normalize")["outputs"]["model.onnx"])
    raw = onnx.load(step(first, "export")["outputs"]["model.onnx"], load_external_data=False)
    graph = onnx.load(str(normalized), load_external_data=False)
    stamp = {p.key: p.value for p in graph.metadata_props}[FACTS_KEY]
    for prop in raw.metadata_props:
        if prop.key == FACTS_KEY:
            prop.value = stamp
    onnx.save(raw, str(normalized))
    for blob in (Path(step(first, "export")["outputs"]["model.onnx"]).parent / "weights").iterdir():
        if not (normalized.parent / "weights" / blob.name).exists():  # the raw graph's weights
            shutil.copyfile(blob, normalized.parent / "weights" / blob.name)
    _reseal(normalized.parent)
    again = ray_run(CPU_RUN, store, tmp_path / "b")
    assert again["status"] == "ok", again["error"]
    opt = step(again, "optimize")
    assert opt["action"] == "run" and opt["proof_check"]["held"] is False
    assert step(again, "tag")["key"] != step(first, "tag")["key"]
    assert all("node" in s for s in again["steps"] if s["action"] != "elided")
