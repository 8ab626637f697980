"""Small file systems for the tests of full and read-only disks: a tmpfs of a given size, and
a read-only view of a folder. Both need root (mount); without it the test skips with the
reason. Whatever happens in the test, the mount is undone."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(*args: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a file system (mount(8)); run the suite as root")
    done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here (mount {' '.join(args)}: {done.stderr.strip()})")


def _unmount(where: Path) -> None:
    done = subprocess.run(["umount", str(where)], capture_output=True, timeout=60)
    if done.returncode != 0:  # something still holds it: detach it now, it goes when freed
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=60)


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (as mount's size=, e.g. "2m") mounted at where (created)."""
    where.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
    try:
        yield where
    finally:
        _unmount(where)


@contextlib.contextmanager
def read_only_view(folder: Path, where: Path) -> Iterator[Path]:
    """folder's files, seen read-only at where (a read-only bind mount)."""
    where.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(folder), str(where))
    try:
        remount = subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(where)], capture_output=True, text=True
        )
        if remount.returncode != 0:
            pytest.skip(f"cannot make a read-only bind mount here ({remount.stderr.strip()})")
        yield where
    finally:
        _unmount(where)
