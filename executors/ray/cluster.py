"""The Ray cluster a run uses, and what is checked on it before any step runs.

`executor.address: null` starts a Ray of the run's own on this machine (one node, bound to
127.0.0.1, no usage stats, no dashboard) and shuts it down after; `auto`, `HOST:PORT` or
`ray://HOST:PORT` joins a running cluster. A process already connected to Ray (a program
that called `ray.init`) keeps its connection.

Before any step runs: every step's resources exist on some node (else the run fails naming
the resource), every node sees the store at the same path and can write it, and every node
with a device resource has the execution provider its steps name.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Self

from executors.ray import remote_functions
from executors.run.wrapper import has_implementation
from executors.store.content import Store
from planner.core import resources
from planner.core.resources import Request
from planner.errors import ConfigError, PlanError, StoreError

# A Ray of the run's own: Ray binds to 127.0.0.1 only when it is told it has no cluster to join.
LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
OBJECT_STORE_BYTES = 128 * 2**20   # tasks pass small outcome dicts; artifacts stay in the store
PROBE_TIMEOUT_S = 180.0
CONNECT_TIMEOUT_S = 10.0
CLIENT_ATTEMPTS = 2                # a Ray Client session that failed to start is tried again


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("executor=ray: Ray is not installed here; install it with "
                          "pip install 'modelplan[ray]', or run with executor=local") from exc
    return ray


@dataclass(frozen=True)
class Node:
    id: str
    ip: str
    total: dict[str, float]   # Ray's names: CPU, GPU, memory and custom resources

    @property
    def name(self) -> str:
        return f"{self.ip} ({self.id[:8]})"

    def has(self, req: Request) -> bool:
        return all(self.total.get(_ray_name(k), 0.0) >= v for k, v in req.amounts.items())

    def whole(self, req: Request) -> dict[str, float]:
        """`req` grown to all of this node's CPUs and all of each custom resource it asks for."""
        return {**req.amounts, "num_cpus": self.total.get("CPU", 1.0),
                **{k: self.total[k] for k in req.custom}}


def _ray_name(amount: str) -> str:
    return {"num_cpus": "CPU", "num_gpus": "GPU"}.get(amount, amount)


def _start_flag(amount: str, value: float) -> str:
    """The `ray start` option that gives a node `value` of `amount`."""
    if amount in resources.TASK_ARGS:
        return f"--{amount.replace('_', '-')}={value:.0f}"
    return f"--resources '{{\"{amount}\": {value:g}}}'"


class Cluster:
    """A connection to Ray for one run (a context manager)."""

    def __init__(self, settings: dict[str, Any], say: Callable[[str], None],
                 local_devices: list[str] | None = None) -> None:
        self.settings = settings
        self.say = say
        self.local_devices = local_devices or []   # device resources a local Ray gets
        self.started = False
        self.ray: Any = None
        self.nodes: list[Node] = []

    # -- connect -------------------------------------------------------------------------
    def __enter__(self) -> Self:
        address = self.settings.get("address")
        if address is None:
            for name, value in LOCAL_ENV.items():
                os.environ.setdefault(name, value)
        self.ray = ray = import_ray()
        if ray.is_initialized():
            self.say("Ray: using the Ray this process is connected to")
        elif address is None:
            self._start_local()
        else:
            self._join(address)
        self.nodes = self.alive_nodes()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.ray.shutdown()

    def _start_local(self) -> None:
        cpus = self.settings.get("num_cpus") or self.settings.get("jobs") or os.cpu_count() or 1
        # the device here is the EP on these cores: as many device steps at once as CPUs
        devices = {name: float(cpus) for name in self.local_devices}
        self.ray.init(address="local", num_cpus=cpus, resources=devices, include_dashboard=False,
                      log_to_driver=False, logging_level=logging.ERROR,
                      object_store_memory=OBJECT_STORE_BYTES)
        self.started = True
        shown = "".join(f", {n}: {v:g}" for n, v in devices.items())
        self.say(f"Ray: started a local Ray for this run ({cpus} CPUs{shown})")

    def _join(self, address: str) -> None:
        _check_reachable(address)
        try:
            self._init_joined(address)
        except Exception as exc:
            if _refused_token(exc):
                raise ConfigError(
                    f"executor.address={address}: the cluster refused this driver's Ray "
                    "token; set RAY_AUTH_MODE=token and give it the cluster's token "
                    "(~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN), or run on "
                    "the head with executor.address=auto") from exc
            raise ConfigError(
                f"executor.address={address}: cannot join a Ray cluster there "
                f"({_first_line(exc)}); start one with `ray start --head`, or set "
                "executor.address=null to start a Ray for this run") from exc
        nodes = self.alive_nodes()
        cpus = sum(n.total.get("CPU", 0) for n in nodes)
        self.say(f"Ray: joined the cluster at {address} ({len(nodes)} nodes, {cpus:g} CPUs)")

    def _init_joined(self, address: str) -> None:
        """ray.init on an existing cluster; a Ray Client server that could not start this
        driver's session in time (a busy head) is asked once more."""
        for attempt in range(CLIENT_ATTEMPTS):
            try:
                self.ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
                return
            except Exception as exc:
                if (not address.startswith("ray://") or attempt == CLIENT_ATTEMPTS - 1
                        or "Initialization failure from server" not in str(exc)):
                    raise
                self.say(f"Ray: the client server at {address} could not start a session "
                         f"({_first_line(exc)}); trying again")
                with suppress(Exception):  # a half-made client session; nothing to keep
                    self.ray.shutdown()

    def alive_nodes(self) -> list[Node]:
        return sorted((Node(n["NodeID"], n["NodeManagerAddress"], dict(n["Resources"]))
                       for n in self.ray.nodes() if n["Alive"]), key=lambda n: n.id)

    # -- checks before anything runs ----------------------------------------------------------
    def check(self, irs: list[dict[str, Any]], store: Store) -> None:
        """Every step can be placed, every node sees the store, device nodes have their EP."""
        steps = [s for ir in irs for s in ir["steps"]]
        missing = sorted({s["op"] for s in steps if not has_implementation(s["op"])})
        if missing:
            raise PlanError(f"the plan needs op(s) {', '.join(missing)}, which this modelplan "
                            "cannot run; nothing was run")
        self._check_placement(steps)
        if self.started:  # a Ray of this run's own is this machine: it sees what we see
            return
        answers = self._probe(store)
        self._check_store(answers, store)
        self._check_eps(steps, answers)

    def _check_placement(self, steps: list[dict[str, Any]]) -> None:
        unplaced: dict[tuple[str, str], set[str]] = {}
        for step in steps:
            req = resources.request(step, self.settings)
            if not any(n.has(req) for n in self.nodes):
                for why in self._lacking(req):
                    unplaced.setdefault(why, set()).add(step["id"])
        if unplaced:
            have = "; ".join(f"{n.name}: {_totals(n)}" for n in self.nodes)
            raise PlanError(*[f"{what}, which step(s) {', '.join(sorted(ids))} ask for "
                              f"(nodes: {have}); {fix}, or change what executor.resources "
                              "asks for; nothing was run"
                              for (what, fix), ids in sorted(unplaced.items())])

    def _lacking(self, req: Request) -> list[tuple[str, str]]:
        """What no node has for `req`, and how to fix it: one per missing resource."""
        missing = [(k, v) for k, v in req.amounts.items()
                   if not any(n.total.get(_ray_name(k), 0.0) >= v for n in self.nodes)]
        if not missing:
            return [(f"no single node of the Ray cluster has {req.describe()}",
                     "start a node that has all of it")]
        return [(f"no node of the Ray cluster has {k}={v:g}",
                 f"start a node with `ray start --address HEAD:PORT {_start_flag(k, v)}`")
                for k, v in missing]

    def _probe(self, store: Store) -> list[dict[str, Any]]:
        """One task on every node: can it see and write the store, which EPs does it have."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        token = uuid.uuid4().hex
        probe_file = store.root / "tmp" / f"probe-{token}"
        probe_file.write_text(token)
        remote = self.ray.remote(remote_functions.probe)
        refs = {n.id: remote.options(num_cpus=0, max_retries=0,
                                     scheduling_strategy=NodeAffinitySchedulingStrategy(
                                         n.id, soft=False)).remote(str(store.root), token)
                for n in self.nodes}
        try:
            answers = []
            for node in self.nodes:
                answers.append(self._answer(node, refs[node.id]))
            return answers
        finally:
            probe_file.unlink(missing_ok=True)

    def _answer(self, node: Node, ref: Any) -> dict[str, Any]:
        from ray.exceptions import GetTimeoutError

        try:
            return self.ray.get(ref, timeout=PROBE_TIMEOUT_S)
        except GetTimeoutError as exc:
            raise PlanError(f"Ray node {node.name} did not answer within {PROBE_TIMEOUT_S:.0f} s; "
                            "check it with `ray status`; nothing was run") from exc
        except Exception as exc:
            raise PlanError(f"Ray node {node.name} cannot run modelplan's tasks "
                            f"({_first_line(exc)}); install modelplan[run,ray] there, in the "
                            "Python that `ray start` runs; nothing was run") from exc

    def _check_store(self, answers: list[dict[str, Any]], store: Store) -> None:
        blind = [f"Ray node {a['node']['ip']} ({a['node']['id'][:8]}) cannot "
                 f"{'see' if not a['sees'] else 'write'} the store {store.root} "
                 f"({a['detail']}); mount it at that path on every node (store.path, or "
                 "--store) on a filesystem with file locks; nothing was run"
                 for a in answers if not (a["sees"] and a["writable"])]
        if blind:
            raise StoreError(*blind)

    def _check_eps(self, steps: list[dict[str, Any]], answers: list[dict[str, Any]]) -> None:
        eps = {a["node"]["id"]: set(a["eps"]) for a in answers}
        wanting: dict[tuple[str, str], set[str]] = {}
        for step in steps:
            device, ep = resources.device(step), step["params"].get("ep")
            if device is None:
                continue
            req = resources.request(step, self.settings)
            for n in self.nodes:
                if n.has(req) and ep not in eps[n.id]:
                    wanting.setdefault((n.name, ep), set()).add(device)
        if wanting:
            raise PlanError(*[
                f"Ray node {node} has resource {', '.join(sorted(devs))} but not the {ep} "
                "execution provider its steps need; install modelplan[run] (onnxruntime-qnn) "
                "there, or start it without that resource; nothing was run"
                for (node, ep), devs in sorted(wanting.items())])

    # -- placement ---------------------------------------------------------------------------
    def task_options(self, req: Request, turn: int = 0) -> dict[str, Any]:
        """Ray task options asking for `req`. A whole-node step is pinned to the `turn`-th node
        that fits (round robin) and asks for all of that node's CPUs and devices, so nothing
        else runs there meanwhile."""
        options: dict[str, Any] = {}
        amounts = req.amounts
        if req.whole_node:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            fit = [n for n in self.nodes if n.has(req)]
            node = fit[turn % len(fit)]
            amounts = node.whole(req)
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node.id, soft=False)
        options.update({k: v for k, v in amounts.items() if k in resources.TASK_ARGS})
        options["resources"] = {k: v for k, v in amounts.items()
                                if k not in resources.TASK_ARGS and v > 0}
        return options


def _check_reachable(address: str) -> None:
    """Fail in seconds when nothing listens at HOST:PORT (Ray itself retries for minutes)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ConfigError(f"executor.address={address}: no Ray cluster answers there "
                          f"({exc.strerror or exc}); start its head with `ray start --head "
                          f"--port {port}`, or set executor.address=null to start a Ray for "
                          "this run") from exc


def _refused_token(exc: BaseException | None) -> bool:
    """Whether Ray's token authentication is why joining failed (anywhere in the chain)."""
    while exc is not None:
        if type(exc).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _totals(node: Node) -> str:
    shown = {k: v for k, v in node.total.items()
             if not k.startswith("node:") and k != "object_store_memory"}
    return ", ".join(f"{k} {v / 2**30:.1f}GiB" if k == "memory" else f"{k} {v:g}"
                     for k, v in sorted(shown.items()))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
