"""A filter's state file, memory-mapped: bits written in place, safe on kill, every byte checked.

Why a kill loses nothing: the data and the live count are written straight into a shared
mapping, i.e. the kernel's page cache, which outlives the process. Only an OS crash or power
loss can lose writes made since the last flush(); they would make keys look new again (a
re-crawl), never the reverse, since lost writes only ever clear bits. A file whose writer did
not close it is flagged (FLAG_OPEN) and reported with a warning on the next open.

What is checked when: opening checks the header page (its CRCs) and, for a file that was closed
cleanly, the data against the CRC of that close (one read of it all, measured by
benchmarks/exact/state_checks.py). A writer opens only a file that passed, so a later close can
never seal damage in. The blocks are reserved when the file is made (and when a writer opens it), so
a full disk is an error then, not a SIGBUS in the middle of a batch; `check()` (run before each
batch) turns a file cut short underneath into a FormatError instead of a SIGBUS.

One writer at a time: an exclusive flock guards the file; readers take a shared one.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from urlseen._lifecycle import Closeable
from urlseen.errors import (
    ClosedError,
    DataChecksumError,
    FormatError,
    StateInUseError,
    UncleanShutdownWarning,
)
from urlseen.state import format, space
from urlseen.state import sealed as _sealed
from urlseen.state.format import FLAG_DATA_CRC, FLAG_OPEN, FORMAT_VERSION, Header
from urlseen.state.store import BufferStore


def read_header(path: str | os.PathLike[str]) -> Header:
    """The header of a state file, without locking or mapping it (for `urlseen info`)."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        raw, size = os.pread(fd, format.HEADER_SIZE, 0), os.fstat(fd).st_size
        header = format.decode(raw, size, str(path))
        format.check_length(header, size, str(path))
        return header
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str], flags: int) -> int:
    """os.open for a file that must be a regular one: a FIFO, a device or a folder is refused
    (FormatError) instead of blocking or being read as a state (O_NONBLOCK: opening a FIFO
    does not wait for a writer)."""
    fd = os.open(path, flags | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else ""
        raise FormatError(f"{path}: not a regular file{f' ({what})' if what else ''}")
    return fd


def _lock(fd: int, readonly: bool, where: str) -> None:
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if readonly else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        held = "being written" if readonly else "open"
        raise StateInUseError(
            f"{where} is {held} elsewhere (another process, or another open filter in this one)"
        ) from None


class MappedFile(Closeable):
    """An open state file: header checked, data mapped at data_offset."""

    _noun = "state file"
    count_offset = format.COUNT_OFFSET

    def __init__(self, path: Path, fd: int, header: Header, readonly: bool) -> None:
        self.path = str(path)
        self._fd = fd
        self.header = header
        self.readonly = readonly
        self.unclean = False  # open() sets it: the last writer did not close the file
        self.data_offset = header.data_offset
        self._size = header.data_offset + header.data_length
        self._refused = False  # a failed open: leave the file exactly as it was
        self._cut = False  # found shorter than its data: never touch the map again
        access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
        try:
            self.buffer = mmap.mmap(fd, self._size, access=access)
        except BaseException:
            self._closed = True  # the caller closes fd: the finalizer must not
            raise

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        params: dict[str, Any],
        data_length: int,
        *,
        overwrite: bool = False,
    ) -> MappedFile:
        """Write a new, empty state file atomically (temp file, then link into place), its
        blocks reserved. FileExistsError naming path if it exists (unless overwrite: then it
        is replaced); ConfigError at once if it cannot fit on the disk; OSError(ENOSPC) if the
        blocks cannot be reserved."""
        target = Path(path)
        header = Header(params, data_length, flags=FLAG_OPEN)
        size = header.data_offset + data_length
        space.check_disk(target, size, f"{space.describe(params)} in a state file")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with space.naming(target):
                os.pwrite(fd, header.encode(), 0)
            space.preallocate(fd, size, str(target))
            with space.naming(target):
                os.fsync(fd)
            if overwrite:
                os.replace(tmp, target)
            else:
                try:
                    os.link(tmp, target)  # fails if target exists: never clobber a state
                except FileExistsError:
                    raise FileExistsError(errno.EEXIST, "exists already", str(target)) from None
                os.unlink(tmp)
            _sealed.sync_folder(target)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        try:
            _lock(fd, False, str(target))
        except BaseException:
            os.close(fd)
            raise
        return cls(target, fd, header, readonly=False)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        check: Callable[[Header, str], None] | None = None,
    ) -> MappedFile:
        """Open and check an existing state file: its header, and the data of a file that was
        closed cleanly against the CRC of that close (FormatError if anything fails).

        `check(header, path)` lets the filter refuse params it cannot use; it runs before the
        data is read, and a refused or damaged file is left exactly as it was. A writer then
        reserves the file's blocks and flags it open (a version 1 header becomes version 2).
        """
        target = Path(path)
        fd = open_regular(target, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            _lock(fd, readonly, str(target))
            raw, size = os.pread(fd, format.HEADER_SIZE, 0), os.fstat(fd).st_size
            header = format.decode(raw, size, str(target))
            if check is not None:
                check(header, str(target))
            format.check_length(header, size, str(target))
            opened = cls(target, fd, header, readonly)
        except BaseException:
            os.close(fd)
            raise
        try:
            opened.unclean = bool(header.flags & FLAG_OPEN)
            if opened.unclean:
                warnings.warn(
                    f"{target} was not closed cleanly by its last writer. After a killed or "
                    "crashed process it is complete; after an OS crash or power loss, keys "
                    "added since its last flush may be reported new again.",
                    UncleanShutdownWarning,
                    stacklevel=3,
                )
            elif header.flags & FLAG_DATA_CRC:
                opened._check_data()
            if not readonly:
                space.preallocate(fd, opened._size, str(target))
                header.flags = FLAG_OPEN
                header.version = FORMAT_VERSION
                with space.naming(target):
                    os.pwrite(fd, header.encode(), 0)
                    os.fsync(fd)
            return opened
        except BaseException:
            opened._refused = True  # nothing to seal: leave the file as it was
            opened.close()
            raise

    def params(self) -> dict[str, Any]:
        return self.header.params

    def stored_count(self) -> int:
        self._usable()
        self.check()
        return self._live_count()

    def _live_count(self) -> int:
        return int.from_bytes(self.buffer[self.count_offset : self.count_offset + 8], "little")

    def _data_crc(self) -> int:
        end = self.data_offset + self.header.data_length
        with memoryview(self.buffer) as whole, whole[self.data_offset : end] as data:
            return zlib.crc32(data)

    def _check_data(self) -> None:
        if self._data_crc() != self.header.data_crc:
            raise DataChecksumError(
                f"{self.path}: corrupted data (checksum mismatch): restore it from a copy, or "
                "delete it to start afresh"
            )

    def check(self) -> None:
        """FormatError if the file is now shorter than its data (cut by another process while
        open): touching the map would kill the process with SIGBUS. One fstat; run before
        every batch."""
        self._usable()
        size = os.fstat(self._fd).st_size
        if size < self._size:
            self._cut = True
            raise self._cut_error(size, "its answers can no longer be trusted")

    def _cut_error(self, size: int, consequence: str) -> FormatError:
        return FormatError(
            f"{self.path}: cut to {size} bytes while open (its data needs {self._size}): "
            f"another process truncated it; {consequence}"
        )

    def verify(self) -> bool:
        """Check the data against the CRC of the last clean close (reads all the data).

        Returns False when there is no CRC to check (the file is open for writing, or was not
        closed cleanly); raises FormatError when the data does not match.
        """
        self.check()
        if not self.header.flags & FLAG_DATA_CRC:
            return False
        self._check_data()
        return True

    def flush(self) -> None:
        """Force the data and count to disk (msync): survives an OS crash from here on."""
        self.check()
        if not self.readonly:
            with space.naming(self.path):
                self.buffer.flush()

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"{self.path}: the {self._noun} is closed")

    def _close(self) -> None:
        """Seal the file: data CRC, clean flag, header seal, msync; then unmap and unlock. A
        file cut short underneath is not touched, and not sealed (FormatError)."""
        try:
            if not self.readonly and not self._refused:
                size = os.fstat(self._fd).st_size
                if self._cut or size < self._size:
                    raise self._cut_error(size, "it was not sealed")
                with space.naming(self.path):
                    self.buffer.flush()  # data on disk before the header says it is clean
                    self.header.count = self._live_count()
                    self.header.data_crc = self._data_crc()
                    self.header.flags = FLAG_DATA_CRC
                    self.buffer[: format.HEADER_SIZE] = self.header.encode()
                    self.buffer.flush()
        finally:
            self.buffer.close()
            os.close(self._fd)


def save_copy(
    store: BufferStore, size: int, count: int, path: str | os.PathLike[str], overwrite: bool
) -> None:
    """Write a new state file with the store's params, its `size` data bytes and `count`."""
    store.check()
    target = MappedFile.create(path, store.params(), size, overwrite=overwrite)
    try:
        start = store.data_offset
        with memoryview(store.buffer) as whole, whole[start : start + size] as data:
            target.buffer[target.data_offset : target.data_offset + size] = data  # no copy
        target.buffer[target.count_offset : target.count_offset + 8] = count.to_bytes(8, "little")
    finally:
        target.close()
