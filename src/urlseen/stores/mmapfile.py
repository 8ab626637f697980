"""A filter's state file, memory-mapped: instant open, bits written in place, safe on kill.

Why a kill loses nothing: the data and the live count are written straight into a shared
mapping, i.e. the kernel's page cache, which outlives the process. Only an OS crash or power
loss can lose writes made since the last flush(); they would make keys look new again (a
re-crawl), never the reverse, since lost writes only ever clear bits. A file whose writer did
not close it is flagged (FLAG_OPEN) and reported with a warning on the next open.

One writer at a time: an exclusive flock guards the file; readers take a shared one.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from urlseen._lifecycle import Closeable
from urlseen.errors import ClosedError, FormatError, StateInUseError
from urlseen.stores import _format
from urlseen.stores._format import FLAG_DATA_CRC, FLAG_OPEN, Header
from urlseen.stores.base import BufferStore


class UncleanShutdownWarning(UserWarning):
    """A state file was not closed by its last writer (killed, crashed)."""


def read_header(path: str | os.PathLike[str]) -> Header:
    """The header of a state file, without locking or mapping it (for `urlseen info`)."""
    with open(path, "rb") as f:
        raw = f.read(_format.HEADER_SIZE)
        size = os.fstat(f.fileno()).st_size
    return _format.decode(raw, size, str(path))


def _lock(fd: int, readonly: bool, where: str) -> None:
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if readonly else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        held = "being written" if readonly else "open"
        raise StateInUseError(
            f"{where} is {held} elsewhere (another process, or another open filter in this one)"
        ) from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MappedFile(Closeable):
    """An open state file: header checked, data mapped at data_offset."""

    _noun = "state file"
    count_offset = _format.COUNT_OFFSET

    def __init__(self, path: Path, fd: int, header: Header, readonly: bool) -> None:
        self.path = str(path)
        self._fd = fd
        self.header = header
        self.readonly = readonly
        self.unclean = False  # open() sets it: the last writer did not close the file
        self.data_offset = header.data_offset
        size = header.data_offset + header.data_length
        access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
        try:
            self.buffer = mmap.mmap(fd, size, access=access)
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
        """Write a new, empty state file atomically (temp file, then link into place)."""
        target = Path(path)
        header = Header(params, data_length, flags=FLAG_OPEN)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.pwrite(fd, header.encode().ljust(_format.HEADER_SIZE, b"\0"), 0)
            os.ftruncate(fd, header.data_offset + data_length)  # sparse: zero pages cost nothing
            os.fsync(fd)
            if overwrite:
                os.replace(tmp, target)
            else:
                os.link(tmp, target)  # fails if target exists: never clobber a state file
                os.unlink(tmp)
            _fsync_dir(target)
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
        """Open and check an existing state file; reads the header page only.

        `check(header, path)` lets the filter refuse params it cannot use; it runs before the
        file is touched, so a refused file is left exactly as it was.
        """
        target = Path(path)
        fd = os.open(target, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            _lock(fd, readonly, str(target))
            raw = os.pread(fd, _format.HEADER_SIZE, 0)
            header = _format.decode(raw, os.fstat(fd).st_size, str(target))
            if check is not None:
                check(header, str(target))
            unclean = bool(header.flags & FLAG_OPEN)
            if unclean:
                warnings.warn(
                    f"{target} was not closed cleanly by its last writer. After a killed or "
                    "crashed process it is complete; after an OS crash or power loss, keys "
                    "added since its last flush may be reported new again.",
                    UncleanShutdownWarning,
                    stacklevel=3,
                )
            if not readonly:
                header.flags = (header.flags | FLAG_OPEN) & ~FLAG_DATA_CRC
                os.pwrite(fd, header.encode_live(), _format.COUNT_OFFSET)
                os.fsync(fd)
            opened = cls(target, fd, header, readonly)
            opened.unclean = unclean
            return opened
        except BaseException:
            os.close(fd)
            raise

    def params(self) -> dict[str, Any]:
        return self.header.params

    def stored_count(self) -> int:
        self._usable()
        return self._live_count()

    def _live_count(self) -> int:
        return int.from_bytes(self.buffer[self.count_offset : self.count_offset + 8], "little")

    def _data_crc(self) -> int:
        end = self.data_offset + self.header.data_length
        with memoryview(self.buffer) as whole, whole[self.data_offset : end] as data:
            return zlib.crc32(data)

    def verify(self) -> bool:
        """Check the data against the CRC of the last clean close (reads all the data).

        Returns False when there is no CRC to check (the file is open for writing, or was not
        closed cleanly); raises FormatError when the data does not match.
        """
        self._usable()
        if not self.header.flags & FLAG_DATA_CRC:
            return False
        if self._data_crc() != self.header.data_crc:
            raise FormatError(f"{self.path}: corrupted data (checksum mismatch)")
        return True

    def flush(self) -> None:
        """Force the data and count to disk (msync): survives an OS crash from here on."""
        self._usable()
        if not self.readonly:
            self.buffer.flush()

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"{self.path}: the {self._noun} is closed")

    def _close(self) -> None:
        """Seal the file: data CRC, clean flag, msync; then unmap and unlock."""
        try:
            if not self.readonly:
                self.buffer.flush()  # data on disk before the header says it is clean
                self.header.count = self._live_count()
                self.header.data_crc = self._data_crc()
                self.header.flags = (self.header.flags & ~FLAG_OPEN) | FLAG_DATA_CRC
                live = self.header.encode_live()
                self.buffer[_format.COUNT_OFFSET : _format.COUNT_OFFSET + len(live)] = live
                self.buffer.flush()
        finally:
            self.buffer.close()
            os.close(self._fd)


def save_copy(
    store: BufferStore, size: int, count: int, path: str | os.PathLike[str], overwrite: bool
) -> None:
    """Write a new state file with the store's params, its `size` data bytes and `count`."""
    target = MappedFile.create(path, store.params(), size, overwrite=overwrite)
    try:
        start = store.data_offset
        with memoryview(store.buffer) as whole, whole[start : start + size] as data:
            target.buffer[target.data_offset : target.data_offset + size] = data  # no copy
        target.buffer[target.count_offset : target.count_offset + 8] = count.to_bytes(8, "little")
    finally:
        target.close()
