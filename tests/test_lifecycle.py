"""One lifecycle for every filter and store (urlseen/_lifecycle.py): a context manager, an
idempotent close(), a `closed` property, and ClosedError for any use after close."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from urlseen import (
    BloomFilter,
    ClosedError,
    ExactFilter,
    FingerprintLibraryFilter,
    MultiDimensionalBloomFilter,
    RotatingBloomFilter,
    SimilarityFilter,
)
from urlseen._lifecycle import Closeable
from urlseen.bloom.counting import CountingBloomFilter
from urlseen.exact.memory_library import MemoryLibrary
from urlseen.exact.sqlite_library import SQLiteLibrary
from urlseen.similarity.url_db import SQLiteUrlDB
from urlseen.state.memory import MemoryStore
from urlseen.state.mmapfile import MappedFile

# name -> (make it in tmp_path, use it once)
LOCAL: dict[str, tuple[Callable[[Path], Any], Callable[[Any], object]]] = {
    "bloom": (lambda d: BloomFilter(100), lambda f: f.add("a")),
    "bloom-file": (lambda d: BloomFilter.create(d / "b.urlseen", 100), lambda f: f.add("a")),
    "counting": (lambda d: CountingBloomFilter(100), lambda f: f.add("a")),
    "mdbf": (lambda d: MultiDimensionalBloomFilter(100), lambda f: f.add("a")),
    "rotating": (lambda d: RotatingBloomFilter(100), lambda f: f.add("a")),
    "rotating-folder": (lambda d: RotatingBloomFilter.create(d / "r", 100), lambda f: f.add("a")),
    "similarity": (lambda d: SimilarityFilter(100), lambda f: f.add("http://x.com/a")),
    "exact": (lambda d: ExactFilter(100), lambda f: f.add("a")),
    "exact-folder": (lambda d: ExactFilter.create(d / "e", 100), lambda f: f.add("a")),
    "library": (lambda d: FingerprintLibraryFilter(), lambda f: f.add("a")),
    "memory-store": (lambda d: MemoryStore(64, {}), lambda s: s.flush()),
    "mapped-file": (
        lambda d: MappedFile.create(d / "m.urlseen", {"kind": "test"}, 64),
        lambda s: s.flush(),
    ),
    "memory-library": (lambda d: MemoryLibrary(), lambda lib: lib.count()),
    "sqlite-library": (
        lambda d: SQLiteLibrary(d / "l.sqlite", create=True),
        lambda lib: lib.count(),
    ),
    "url-db": (lambda d: SQLiteUrlDB(d / "u.sqlite", create=True), lambda db: db.count()),
}


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_one_lifecycle(name: str, tmp_path: Path) -> None:
    make, use = LOCAL[name]
    thing = make(tmp_path)
    assert isinstance(thing, Closeable)
    with thing as entered:
        assert entered is thing and not thing.closed
        use(thing)
    assert thing.closed
    thing.close()  # again: nothing happens
    assert thing.closed
    with pytest.raises(ClosedError, match="is closed"):
        use(thing)


@pytest.mark.parametrize("name", ["bloom-file", "exact-folder", "sqlite-library", "url-db"])
def test_garbage_collection_closes_quietly(name: str, tmp_path: Path) -> None:
    make, use = LOCAL[name]
    gc.collect()  # what earlier tests left behind must not close its files during the test
    fds = len(os.listdir("/proc/self/fd"))
    thing = make(tmp_path)
    use(thing)
    del thing
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == fds  # its files and locks were released


def test_a_collected_state_file_is_sealed(tmp_path: Path) -> None:
    f = BloomFilter.create(tmp_path / "b.urlseen", 100)
    f.add("a")
    del f
    gc.collect()
    with BloomFilter.open(tmp_path / "b.urlseen", readonly=True) as again:
        assert "a" in again and again.verify()  # closed cleanly: the checksum is valid


def test_redis_handles_share_it(redis_url: str, redis_name: str) -> None:
    from urlseen import RedisBloomFilter, RedisLibrary

    with RedisBloomFilter(redis_url, redis_name, capacity=100) as shared:
        assert isinstance(shared, Closeable) and not shared.closed
    assert shared.closed
    with pytest.raises(ClosedError, match="the filter is closed"):
        shared.add("a")
    with RedisLibrary(redis_url, redis_name + "-lib", capacity=100) as lib:
        assert not lib.closed
    with pytest.raises(ClosedError, match="the library is closed"):
        lib.claim([bytes(16)])
