"""Fault recognition and leases, without a run: a full disk however it is worded, and leases
that gc honours only while their run holds them."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from executors.store.content import Store
from executors.store.diskfull import disk_full_error, is_disk_full
from executors.store.lease import Lease, gc_lock, held_keys


def raised_from(cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise RuntimeError("export failed") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("exc,full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (RuntimeError("safetensors_rust.SafetensorError: No space left on device (os error 28)"), True),
    (raised_from(OSError(errno.ENOSPC, "No space left on device")), True),
    (OSError(errno.ENOENT, "No such file or directory"), False),
    (RuntimeError("ONNX Runtime: invalid graph"), False),
])
def test_a_full_disk_is_recognised_however_it_is_worded(exc: BaseException, full: bool) -> None:
    assert is_disk_full(exc) is full


def test_the_space_needed_is_estimated_from_the_inputs(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "model.onnx").write_bytes(b"\0" * (3 << 20))
    line = str(disk_full_error(tmp_path, "the store", {"id": "normalize", "op": "normalize",
                                                       "params": {}}, {"model": tmp_path / "in"}))
    assert line.startswith(f"step normalize (normalize): the store {tmp_path} ran out of disk")
    assert "needs about 6.0 MB (twice its inputs)" in line and "is free there now" in line


def test_gc_sees_the_leases_of_live_runs_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    with Lease(store.root) as lease:
        lease.hold(["a" * 64, "b" * 64])
        with gc_lock(store.root, exclusive=True):
            assert held_keys(store.root) == ({"a" * 64, "b" * 64}, 1)
    stale = store.root / "leases" / f"{os.getpid()}.dead.json"
    stale.write_text('["' + "c" * 64 + '"]')  # a lease whose run died: nobody holds its lock
    with gc_lock(store.root, exclusive=True):
        assert held_keys(store.root) == (set(), 0)
    assert not stale.exists()
