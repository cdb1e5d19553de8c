"""Where the Ray executor asks Ray to put each step, on a described cluster (no Ray started):
device steps ask for their target's resource, perf takes all of one device node, and a
request no node can meet is refused before anything runs, one line per missing resource."""

from __future__ import annotations

from typing import Any

import pytest

from executors.ray.cluster import Cluster, Node
from planner.core import resources
from planner.errors import PlanError

SETTINGS = {"address": "auto", "retries": 3, "step_retries": 0, "resources": {}}
DEVICE = Node("d" * 56, "10.0.0.1", {"CPU": 8.0, "memory": 3e10, "qnn_htp": 1.0})
PLAIN = Node("p" * 56, "10.0.0.2", {"CPU": 4.0, "memory": 3e10})
QNN = {"ep": "qnn", "backend": "htp"}


def cluster(*nodes: Node, **settings: Any) -> Cluster:
    c = Cluster({**SETTINGS, **settings}, say=lambda _m: None)
    c.nodes = list(nodes)
    return c


def options(c: Cluster, op: str, params: dict[str, Any], turn: int = 0) -> dict[str, Any]:
    return c.task_options(resources.request({"op": op, "params": params}, c.settings), turn)


def test_device_steps_ask_for_the_target_and_others_for_a_cpu() -> None:
    c = cluster(DEVICE, PLAIN)
    assert options(c, "export", {}) == {"num_cpus": 1.0, "resources": {}}
    assert options(c, "compile", QNN) == {"num_cpus": 1.0, "resources": {"qnn_htp": 1.0}}
    assert options(c, "verify", {"ep": "cpu", "backend": None}) == {"num_cpus": 1.0,
                                                                    "resources": {}}


def test_perf_takes_a_whole_device_node() -> None:
    c = cluster(PLAIN, DEVICE)
    got = options(c, "perf", QNN)
    assert got["scheduling_strategy"].node_id == DEVICE.id
    assert not got["scheduling_strategy"].soft
    assert got["num_cpus"] == 8.0 and got["resources"] == {"qnn_htp": 1.0}


def test_whole_node_steps_take_turns_over_the_nodes_that_fit() -> None:
    other = Node("e" * 56, "10.0.0.3", {"CPU": 2.0, "qnn_htp": 4.0})
    c = cluster(DEVICE, PLAIN, other)
    placed = [options(c, "perf", QNN, turn)["scheduling_strategy"].node_id for turn in range(4)]
    assert placed == [DEVICE.id, other.id, DEVICE.id, other.id]
    assert options(c, "perf", QNN, 1)["resources"] == {"qnn_htp": 4.0}


def test_overrides_ask_for_memory_and_custom_resources() -> None:
    c = cluster(DEVICE, PLAIN, resources={"export": {"num_cpus": 2, "memory": 4e9, "fast": 1}})
    assert options(c, "export", {}) == {"num_cpus": 2.0, "memory": 4e9,
                                        "resources": {"fast": 1.0}}


def test_what_no_node_has_is_refused_naming_it() -> None:
    steps = [{"id": s, "op": s, "params": QNN} for s in ("compile", "verify", "perf")]
    with pytest.raises(PlanError) as err:
        cluster(PLAIN)._check_placement([{"id": "export", "op": "export", "params": {}},
                                         *steps])
    assert err.value.lines == [(
        "no node of the Ray cluster has qnn_htp=1, which step(s) compile, perf, verify ask for "
        "(nodes: 10.0.0.2 (pppppppp): CPU 4, memory 27.9GiB); start a node with `ray start "
        "--address HEAD:PORT --resources '{\"qnn_htp\": 1}'`, or change what "
        "executor.resources asks for; nothing was run")]


def test_a_request_split_over_nodes_is_refused_too() -> None:
    c = cluster(DEVICE, PLAIN, resources={"compile": {"num_cpus": 6}})
    c._check_placement([{"id": "compile", "op": "compile", "params": QNN}])  # 8 CPUs there
    c = cluster(Node("d" * 56, "10.0.0.1", {"CPU": 1.0, "qnn_htp": 1.0}), PLAIN,
                resources={"compile": {"num_cpus": 4}})
    with pytest.raises(PlanError, match="no single node of the Ray cluster has num_cpus=4 "
                                        "qnn_htp=1, which step"):
        c._check_placement([{"id": "compile", "op": "compile", "params": QNN}])
