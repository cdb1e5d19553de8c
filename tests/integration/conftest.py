"""Fixtures for runs: builds made once per test session and shared by the tests that only read
them, and copies of a shared build's store for the tests that change a store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from tests.conftest import run_cli, run_cli_here, shared_dir

CPU_RUN = ("model=tiny_bert", "quant=none", "target=cpu", "verify=none", "perf=none")
# perf on the HTP simulator: three timed runs and one profiled run, no warm-up (a test reads
# that the figures are there, not what they are; the default is 1 + 5 timed and 1 + 3 profiled)
QNN_RUN = ("model=tiny_bert", "export.shapes.sequence_length=32", "verify.samples=2",
           "perf.iterations=3", "perf.warmup=0", "perf.profile_runs=1")


def run_json(*args: str, store: Path, outputs: Path, fresh: bool = False,
             timeout: float = 900) -> tuple[int, Any, str]:
    """`modelplan run ARGS --json`: (exit code, run record or None, stderr). In this process
    (`run_cli_here`), or with `fresh` in a new one, which a build of gigabytes needs so that its
    verify's memory goes with it."""
    cli = ("run", *args, "--store", str(store), "--outputs", str(outputs), "--json")
    result = run_cli(*cli, timeout=timeout) if fresh else run_cli_here(*cli)
    record = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result.returncode, record, result.stderr


def built(factory: pytest.TempPathFactory, name: str, *args: str) -> dict[str, Any]:
    """A successful `modelplan run ARGS` in its own store: record, store and outputs."""
    store, outputs = factory.mktemp(f"{name}-store"), factory.mktemp(f"{name}-outputs")
    code, record, err = run_json(*args, store=store, outputs=outputs)
    assert code == 0, err
    return {"record": record, "store": store, "outputs": outputs}


def shared_build(factory: pytest.TempPathFactory, name: str, *args: str) -> dict[str, Any]:
    """`built`, made once per test session however many xdist workers ask for it: the first
    builds it, the others wait for it and read its record. A test may read the build, and run
    more in its store (new keys); one that changes what is there works on `store_copy`.

    `pristine` is a copy of the store made right after the build, before any test ran in it."""
    root = shared_dir(factory) / f"shared-{name}"
    saved = root / "built.json"
    with FileLock(f"{root}.lock"):
        if not saved.is_file():
            if root.exists():  # a build that failed in another worker: try it afresh
                shutil.rmtree(root)
            store, outputs = root / "store", root / "outputs"
            store.mkdir(parents=True)
            outputs.mkdir()
            code, record, err = run_json(*args, store=store, outputs=outputs)
            assert code == 0, err
            shutil.copytree(store, root / "pristine")
            saved.write_text(json.dumps(record))
    return {"record": json.loads(saved.read_text()), "store": root / "store",
            "outputs": root / "outputs", "pristine": root / "pristine"}


def minilm_store(factory: pytest.TempPathFactory) -> Path:
    """The store every build of the packaged MiniLM in this session goes to, whichever test
    and xdist worker builds first: its export, quantize and compile steps run once (the store
    locks each key while it builds), not once per test."""
    store = shared_dir(factory) / "minilm-store"
    store.mkdir(exist_ok=True)
    return store


def store_copy(build: dict[str, Any], dest: Path) -> Path:
    """A store of the test's own holding what `build` built (and nothing other tests added):
    new inodes, so every file is re-hashed once. Paths in the build's record are under
    build["store"]; the copy has the same layout."""
    shutil.copytree(build["pristine"], dest)
    return dest


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return shared_build(tmp_path_factory, "cpu", *CPU_RUN)


@pytest.fixture(scope="session")
def qnn_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return shared_build(tmp_path_factory, "qnn", *QNN_RUN)


def step(record: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in record["steps"] if s["id"] == step_id)
