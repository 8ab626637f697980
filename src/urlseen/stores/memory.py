"""In-process memory for a filter: an anonymous mmap, zero-filled lazily by the kernel.

Anonymous maps are page aligned (so 512-bit blocks sit on cache lines) and cost nothing until
a page is touched, which a bytearray of the same size would not give us. The map is private:
Python's default for mmap(-1) is MAP_SHARED, which Linux backs with shmem, where MADV_HUGEPAGE
does nothing unless shmem_enabled allows it (it is "never" by default). Large ones ask for
transparent huge pages: with one random probe per key, a 4 KiB page per probe is a TLB miss per
key once the table outgrows the TLB's reach (benchmarks/RESULTS.md, batch-20m).
"""

from __future__ import annotations

import contextlib
import mmap
from typing import Any

from urlseen._lifecycle import Closeable
from urlseen.stores import _space

_HUGE_PAGE = 2 * 1024 * 1024
# POSIX only: elsewhere mmap(-1) has no flags argument, and no huge pages to ask for.
_PRIVATE = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}


class MemoryStore(Closeable):
    """Bits in this process only; gone when the filter is closed or collected."""

    _noun = "store"
    data_offset = 0
    count_offset = -1
    readonly = False
    path = None

    def __init__(self, nbytes: int, params: dict[str, Any]) -> None:
        """ConfigError, before anything is allocated, if nbytes exceed the memory available."""
        _space.check_memory(nbytes, _space.describe(params))
        self.buffer = mmap.mmap(-1, max(nbytes, 1), **_PRIVATE)
        if nbytes >= _HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
            with contextlib.suppress(OSError):  # no THP here: 4 KiB pages still work
                self.buffer.madvise(mmap.MADV_HUGEPAGE)
        self._params = params

    def params(self) -> dict[str, Any]:
        return self._params

    def stored_count(self) -> int:
        self._usable()
        return 0

    def check(self) -> None:
        """Memory cannot be cut short underneath."""
        self._usable()

    def flush(self) -> None:
        """Nothing to persist."""
        self._usable()

    def _close(self) -> None:
        self.buffer.close()
