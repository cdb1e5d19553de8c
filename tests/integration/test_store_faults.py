"""A store that cannot be written is one clear line before any step runs."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import run_cli
from tests.integration.conftest import CPU_RUN
from tests.integration.mounts import IS_ROOT, tmpfs, unwritable_dir


def refused_at_start(store: Path, cause: str, tmp_path: Path) -> None:
    result = run_cli("run", *CPU_RUN, "--store", str(store), "--outputs", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("modelplan: error: store "), result.stderr
    assert cause in lines[0] and "--store DIR" in lines[0]
    assert "running" not in result.stderr and not any((tmp_path / "out").glob("*"))


def test_a_read_only_store(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        refused_at_start(ro / "store", "Read-only file system", tmp_path)


def test_a_store_without_permission(tmp_path: Path) -> None:
    with unwritable_dir(tmp_path / "locked") as locked:
        refused_at_start(locked, "Operation not permitted" if IS_ROOT else "Permission denied",
                         tmp_path)


def test_a_store_path_too_long_or_not_a_directory(tmp_path: Path) -> None:
    refused_at_start(tmp_path / ("x" * 300), "is 300 bytes long, more than the 255", tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("")
    refused_at_start(afile, f"{afile} is a file, not a directory", tmp_path)
    refused_at_start(afile / "store", f"{afile} is a file, not a directory", tmp_path)
    plan = run_cli("plan", *CPU_RUN, f"store.path={tmp_path / ('y' * 5000)}")
    assert plan.returncode == 2 and "Traceback" not in plan.stderr
    assert "more than the 255 a file name may have" in plan.stderr


def test_a_full_disk_fails_the_step_cleanly_and_the_next_run_completes(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "20m") as disk:
        store, filler = disk / "store", disk / "filler"
        filler.write_bytes(b"\0" * (shutil.disk_usage(disk).free - 1_100_000))  # ~1.1 MB left
        result = run_cli("run", *CPU_RUN, "--store", str(store), "--outputs", str(tmp_path / "o"))
        assert result.returncode == 1, result.stderr
        error = result.stderr.strip().splitlines()[-1]
        assert error.startswith("modelplan: error: step ") and "Traceback" not in result.stderr
        assert f"the store {store} ran out of disk space; the step needs about " in error
        assert "MB (twice its inputs)" in error and "free space there or pass --store" in error
        assert list((store / "tmp").iterdir()) == []  # its temporary output is gone
        assert all((e / "manifest.json").is_file() for e in store.glob("??/*"))  # no half entry
        filler.unlink()
        again = run_cli("run", *CPU_RUN, "--store", str(store), "--outputs", str(tmp_path / "o"))
        assert again.returncode == 0, again.stderr
        assert run_cli("store", "verify", "--store", str(store)).returncode == 0
