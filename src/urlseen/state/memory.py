"""In-process memory for a filter: an anonymous mmap, zero-filled lazily by the kernel.

Anonymous maps are page aligned (so 512-bit blocks sit on cache lines) and cost nothing until
a page is touched, which a bytearray of the same size would not give us. The map is private:
Python's default for mmap(-1) is MAP_SHARED, which Linux backs with shmem, where MADV_HUGEPAGE
does nothing unless shmem_enabled allows it (it is "never" by default). Large ones ask for
transparent huge pages: with one random probe per key, a 4 KiB page per probe is a TLB miss per
key once the table outgrows the TLB's reach (measured by benchmarks/peers/run.py).

A huge page covers only a whole, aligned 2 MiB of the map, and a map is only sure to be 4 KiB
aligned: the advice runs to the end of the data's last 2 MiB when that costs at most an eighth
more memory, and the data starts at the map's first 2 MiB boundary. The map is a whole number of
2 MiB pages plus a spare one (address space, never touched): Linux (6.7 on) then places it on a
boundary itself, so the data starts at offset 0; elsewhere at data_offset. So a 1M-URL filter
(1.85 MiB) sits in one huge page instead of 474 small ones: one TLB entry for every probe.
"""

from __future__ import annotations

import contextlib
import mmap

from urlseen import _core
from urlseen._lifecycle import Closeable
from urlseen.state import space as _space

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_HUGE_PAGE = 2 * 1024 * 1024
_ROUND_UP_COST = 8  # round the advice up to a whole huge page if that adds <= 1/8 of the data
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
        huge = _huge_bytes(nbytes)
        if huge:
            pages = -(-max(nbytes, huge) // _HUGE_PAGE) + 1
            self.buffer = mmap.mmap(-1, pages * _HUGE_PAGE, **_PRIVATE)
            self.data_offset = _core.align_offset(self.buffer, _HUGE_PAGE)
            with contextlib.suppress(OSError):  # no THP here: 4 KiB pages still work
                self.buffer.madvise(mmap.MADV_HUGEPAGE, self.data_offset, huge)
        else:
            self.buffer = mmap.mmap(-1, max(nbytes, 1), **_PRIVATE)
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


def _huge_bytes(nbytes: int) -> int:
    """How much of nbytes of data, from its start, to put in huge pages: whole 2 MiB pages,
    the last one partly empty if that costs at most 1/_ROUND_UP_COST more; 0 for none."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return 0
    whole = -(-nbytes // _HUGE_PAGE) * _HUGE_PAGE
    if (whole - nbytes) * _ROUND_UP_COST <= nbytes:
        return whole
    return nbytes // _HUGE_PAGE * _HUGE_PAGE
