"""Where an in-memory filter's bits sit: on a 2 MiB boundary, so that huge pages can hold them.

A 1M-URL blocked filter is 1.85 MiB: in a map that is merely 4 KiB aligned no whole huge page
fits inside it, and every probe needs one of ~474 small pages' TLB entries. The addresses here
are read with ctypes, independently of the C helper the store uses.
"""

from __future__ import annotations

import ctypes
import mmap

import pytest

from urlseen import BloomFilter, _core
from urlseen.state import memory
from urlseen.state.memory import MemoryStore

HUGE = 2 * 1024 * 1024


def address(buffer: bytearray | mmap.mmap) -> int:
    view = ctypes.c_char.from_buffer(buffer)
    try:
        return ctypes.addressof(view)
    finally:
        del view  # an mmap cannot close while ctypes exports it


@pytest.mark.parametrize("alignment", [1, 64, 4096, HUGE])
def test_align_offset_points_at_the_first_aligned_byte(alignment: int) -> None:
    for buffer in (bytearray(100), bytearray(5000), mmap.mmap(-1, 3 * HUGE)):
        offset = _core.align_offset(buffer, alignment)
        assert 0 <= offset < alignment
        assert (address(buffer) + offset) % alignment == 0


def test_align_offset_wants_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="power of two"):
        _core.align_offset(bytearray(8), 3)
    with pytest.raises(ValueError, match="power of two"):
        _core.align_offset(bytearray(8), 0)


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no transparent huge pages")
@pytest.mark.parametrize(
    ("nbytes", "huge"),
    [
        (64, 0),
        (HUGE * 8 // 9 - 1, 0),  # rounding up would cost more than an eighth
        (1_936_064, HUGE),  # a 1M-URL blocked filter at 0.001: one whole huge page
        (HUGE, HUGE),
        (HUGE + 4096, HUGE),  # the tail stays in small pages
        (38_720_896, 19 * HUGE),  # 20M URLs: the last huge page partly empty
    ],
)
def test_which_bytes_get_huge_pages(nbytes: int, huge: int) -> None:
    assert memory._huge_bytes(nbytes) == huge


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no transparent huge pages")
def test_a_million_url_filter_starts_on_a_huge_page_boundary() -> None:
    f = BloomFilter(1_000_000, 0.001)
    store = f._store
    assert isinstance(store, MemoryStore)
    nbytes = f.stats().bits // 8
    assert (address(store.buffer) + store.data_offset) % HUGE == 0
    assert len(store.buffer) >= store.data_offset + HUGE >= store.data_offset + nbytes
    keys = [f"https://example.com/{i}" for i in range(20_000)]
    assert f.add_many(keys) == [True] * len(keys)
    assert all(key in f for key in keys)
    assert f.add(keys[0]) is False
    f.close()


def test_a_small_store_maps_only_its_bytes() -> None:
    store = MemoryStore(4096, {})
    assert store.data_offset == 0
    assert len(store.buffer) == 4096
    store.close()
