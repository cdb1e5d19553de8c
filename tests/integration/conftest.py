"""Fixtures for runs: a built tiny_bert CPU run shared by the tests that only read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

CPU_RUN = ("model=tiny_bert", "quant=none", "target=cpu", "verify=none", "perf=none")


def run_json(*args: str, store: Path, outputs: Path, timeout: float = 900) -> tuple[int, Any, str]:
    """`modelplan run ARGS --json`: (exit code, run record or None, stderr)."""
    result = run_cli("run", *args, "--store", str(store), "--outputs", str(outputs), "--json",
                     timeout=timeout)
    record = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result.returncode, record, result.stderr


def built(factory: pytest.TempPathFactory, name: str, *args: str) -> dict[str, Any]:
    """A successful `modelplan run ARGS` in its own store: record, store and outputs."""
    store, outputs = factory.mktemp(f"{name}-store"), factory.mktemp(f"{name}-outputs")
    code, record, err = run_json(*args, store=store, outputs=outputs)
    assert code == 0, err
    return {"record": record, "store": store, "outputs": outputs}


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return built(tmp_path_factory, "cpu", *CPU_RUN)


def step(record: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in record["steps"] if s["id"] == step_id)
