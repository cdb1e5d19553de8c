"""Small real file systems for fault tests: a size-limited or read-only tmpfs (needs root, which
CI has), and a directory even root cannot write into (the ext4 immutable attribute)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

IS_ROOT = os.geteuid() == 0


@contextmanager
def tmpfs(path: Path, size: str, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. 20m) mounted at `path` for the block."""
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:  # root without CAP_SYS_ADMIN: the environment, not modelplan
        pytest.fail(f"mount -t tmpfs failed as root ({mounted.stderr.strip()}); run the tests "
                    "where root may mount (CI does)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextmanager
def unwritable_dir(path: Path) -> Iterator[Path]:
    """A directory this process may not write into: mode 0555, or for root (whom modes do not
    stop) the immutable attribute."""
    path.mkdir(parents=True, exist_ok=True)
    if not IS_ROOT:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    immutable = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if immutable.returncode != 0:
        pytest.skip(f"the file system of {path} has no immutable attribute (chattr +i)")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)
