"""The build server keeps what its commands composed (planner/config/composecache.py) and never
serves a stale one: a changed override, an environment variable the config reads, and an edit
of conf/ each give what a command run in-process gives."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import run_cli
from tests.integration import test_build_server
from tests.integration.test_build_server import (
    copy_of_the_code,
    logs,
    on,
    served,
    start_server,
    started_pids,
    wait_for,
)

cache = test_build_server.cache  # the fixture: a cache dir of the test's own, servers stopped
EXPORTER_FROM_ENV = "export.exporter=${oc.env:MODELPLAN_TEST_EXPORTER}"


def config_of(*args: str, env: dict[str, str], cwd: Path | None = None) -> dict:
    done = run_cli("config", "--json", *args, env=env, **({"cwd": cwd} if cwd else {}))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_served_compose_follows_the_overrides_and_the_environment(cache: Path) -> None:
    start_server(cache)
    for _ in range(2):  # the second round composes nothing the server has not kept
        for args in (["model=tiny_bert"], ["model=tiny_bert", "quant=none"]):
            before = served(cache)
            assert config_of(*args, env=on(cache)) == config_of(*args, env={}), args
            assert served(cache) == before + 1, logs(cache)
        for exporter in ("torchscript", "dynamo"):
            env = {"MODELPLAN_TEST_EXPORTER": exporter}
            got = config_of("model=tiny_bert", EXPORTER_FROM_ENV, env=on(cache, **env))
            assert got["export"]["exporter"] == exporter
            assert got == config_of("model=tiny_bert", EXPORTER_FROM_ENV, env=env)


def test_an_edit_of_conf_is_composed_anew(cache: Path, tmp_path: Path) -> None:
    code = copy_of_the_code(tmp_path / "code")
    env = {"PYTHONPATH": str(code)}
    start_server(cache, cwd=code, **env)
    first = config_of("model=tiny_bert", env=on(cache, **env), cwd=code)
    assert first["model"]["random_init"]["seed"] == 0 and served(cache) == 1, logs(cache)
    conf = code / "conf" / "model" / "tiny_bert.yaml"
    conf.write_text(conf.read_text().replace("seed: 0", "seed: 7"))
    os.utime(conf, ns=(conf.stat().st_atime_ns, conf.stat().st_mtime_ns + 10**9))
    second = config_of("model=tiny_bert", env=on(cache, **env), cwd=code)
    assert second["model"]["random_init"]["seed"] == 7
    wait_for(lambda: len(started_pids(cache)) == 2, "a server of the edited conf/")
    wait_for(lambda: len(list((cache / "modelplan" / "server").glob("*.pid"))) == 2,
             "the new server to listen")
    third = config_of("model=tiny_bert", env=on(cache, **env), cwd=code)
    assert third == second and served(cache) == 2, logs(cache)
