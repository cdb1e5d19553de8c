"""A run publishes only where it may: --outputs names a folder of the user's (not empty, not
the root or a system folder) and --name a plain folder name; each refusal is one line, exit 2,
before anything is built or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

RUN = ("run", "model=tiny_bert", "target=cpu", "quant=none", "verify=none", "perf=none")


@pytest.mark.parametrize(("args", "said"), [
    (("--outputs", "/"), "a system folder"),
    (("--outputs", "/etc/modelplan"), "a system folder"),
    (("--outputs", ""), "--outputs is empty"),
    (("--name", ""), "--name ''"),
    (("--name", "a\nb"), "control characters"),
    (("--name", "../up"), "one folder name under --outputs"),
])
def test_a_bad_place_is_refused_before_anything_runs(tmp_path: Path, args: tuple[str, ...],
                                                     said: str) -> None:
    store = tmp_path / "store"
    extra = ("--outputs", str(tmp_path / "out")) if "--outputs" not in args else ()
    result = run_cli(*RUN, "--store", str(store), *extra, *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.stderr
    assert not list(store.rglob("manifest.json")), "a step was built"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert {p.name for p in tmp_path.iterdir()} <= {"store", "out"}  # nothing published here


def test_sweep_dir_is_checked_alike(tmp_path: Path) -> None:
    result = run_cli("run", "-m", "model=tiny_bert", "quant=none,w8a8", "target=cpu",
                     "verify=none", "perf=none", "--store", str(tmp_path / "s"),
                     "--sweep-dir", "/", cwd=tmp_path)
    assert result.returncode == 2 and "a system folder" in result.stderr
