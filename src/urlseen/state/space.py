"""Room for a state: a filter is refused at once when it cannot fit, and a state file's blocks
are reserved when it is made, so that a full disk is an error at create, never a SIGBUS while
the file is mapped."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from urlseen.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: a filter in memory starts without pathlib
    from pathlib import Path
    from typing import Any

_NOT_SUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)


def size_text(nbytes: float) -> str:
    """1.5 GiB, 46.0 MiB, 812 bytes."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


def describe(params: dict[str, Any]) -> str:
    """'the bloom filter (capacity 1,000,000 at error rate 0.001)' from a filter's params."""
    kind = params.get("kind", "urlseen")
    capacity, rate = params.get("capacity"), params.get("error_rate")
    if isinstance(capacity, int) and isinstance(rate, float):
        return f"the {kind} filter (capacity {capacity:,} at error rate {rate:g})"
    return f"the {kind} filter"


def available_memory() -> int | None:
    """Bytes of memory this process could still get (Linux MemAvailable), else the physical
    memory, else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def check_memory(nbytes: int, what: str) -> None:
    """ConfigError, at once, if `what` (nbytes of memory) exceeds the memory available: a
    Bloom filter touches its pages at random, so one that does not fit thrashes or is killed."""
    available = available_memory()
    if available is not None and nbytes > available:
        raise ConfigError(
            f"{what} needs {size_text(nbytes)} of memory; {size_text(available)} is available: "
            "lower the capacity or raise the error rate"
        )


def check_disk(path: Path, nbytes: int, what: str) -> None:
    """ConfigError, at once, if a state file of nbytes at path cannot fit on its file system."""
    try:
        stats = os.statvfs(path.parent)
    except OSError:
        return  # the create that follows reports the folder's own problem
    free = stats.f_bavail * stats.f_frsize
    if nbytes > free:
        raise ConfigError(
            f"{path}: {what} needs {size_text(nbytes)} of disk; {size_text(free)} is free "
            "there: lower the capacity or raise the error rate, or choose another place"
        )


def preallocate(fd: int, size: int, where: str) -> None:
    """Reserve the blocks of the file's first `size` bytes (its length becomes at least size):
    its memory map can then never meet a full disk. OSError(ENOSPC) naming the file if they do
    not fit; on a file system that cannot reserve, the file is only extended (sparse)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in _NOT_SUPPORTED:
            raise OSError(
                exc.errno,
                f"{os.strerror(exc.errno or errno.EIO)} (reserving {size_text(size)} for the "
                "state file)",
                where,
            ) from None
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)


@contextlib.contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """An OSError that does not say which file (a write, an fsync, an msync) names path."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = os.fspath(path)
        raise
