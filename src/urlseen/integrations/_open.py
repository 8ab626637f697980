"""Which filter an integration opens, from plain values: kind, state, Redis URL.

Integrations (the Scrapy dupefilter, `urlseen crawl`) name a filter by kind; this module turns
that into an open filter. Shared (Redis) kinds are a registry, so a new shared filter plugs in
with one `REDIS_KINDS[kind] = opener` line.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from urlseen.errors import ConfigError
from urlseen.filters.base import FilterStats, Key, SeenFilter
from urlseen.filters.bloom import BloomFilter
from urlseen.filters.exact import LIBRARY_FILE, ExactFilter
from urlseen.stores.sqlite_library import SQLiteLibrary

LOCAL_KINDS = ("exact", "bloom")
DEFAULT_KIND = "exact"  # never drops a page, on one machine and shared through Redis alike
DEFAULT_ERROR_RATES = {"exact": 1e-3, "bloom": 1e-6}
BLOOM_STATE_FILE = "seen.bloom"  # a Bloom filter's file inside a state folder (JOBDIR)

RedisOpener = Callable[[str, str, int, float | None], SeenFilter]


def _redis_bloom(url: str, name: str, capacity: int, error_rate: float | None) -> SeenFilter:
    from urlseen.filters.redis_bloom import RedisBloomFilter

    if RedisBloomFilter.exists(url, name):  # an existing shared filter keeps its parameters
        return RedisBloomFilter(url, name)
    rate = DEFAULT_ERROR_RATES["bloom"] if error_rate is None else error_rate
    return RedisBloomFilter(url, name, capacity, rate)


def _redis_exact(url: str, name: str, capacity: int, error_rate: float | None) -> SeenFilter:
    """Exact and shared: the fingerprint library in Redis decides every request atomically
    (with several writers local counters prove nothing); error_rate does not apply."""
    from urlseen.filters.library import FingerprintLibraryFilter
    from urlseen.stores.redis_library import RedisLibrary

    exists = RedisLibrary.exists(url, name)
    library = RedisLibrary(url, name) if exists else RedisLibrary(url, name, capacity)
    return FingerprintLibraryFilter(library=library)


def _redis_dsbf(url: str, name: str, capacity: int, error_rate: float | None) -> SeenFilter:
    """The splittable Bloom filter: its error rate holds however far the crawl outgrows
    capacity."""
    from urlseen.filters.dsbf import SplittableBloomFilter

    if SplittableBloomFilter.exists(url, name):
        return SplittableBloomFilter(redis=url, name=name)
    rate = DEFAULT_ERROR_RATES["bloom"] if error_rate is None else error_rate
    return SplittableBloomFilter(capacity, rate, redis=url, name=name)


REDIS_KINDS: dict[str, RedisOpener] = {
    "bloom": _redis_bloom,
    "exact": _redis_exact,
    "dsbf": _redis_dsbf,
}
"""Filters shared through Redis, by kind: opener(redis_url, name, capacity, error_rate)."""


def open_filter(
    kind: str,
    *,
    capacity: int,
    error_rate: float | None = None,
    state: str | Path | None = None,
    redis_url: str | None = None,
    name: str = "scrapy",
) -> SeenFilter:
    """Open (or create) the filter: shared through Redis when redis_url is given, else
    persistent at `state` (a folder for exact; for bloom a file, or a folder that gets
    seen.bloom), else one that lives as long as the process.

    Without a state, exact keeps its library in a temporary folder deleted on close, so memory
    stays bounded however long the crawl.
    """
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
        raise ConfigError(f"capacity must be a positive int, not {capacity!r}")
    if redis_url is not None:
        if state is not None:
            raise ConfigError(
                "a filter is either shared through Redis or kept in a state, not both"
            )
        if kind not in REDIS_KINDS:
            raise ConfigError(
                f"no {kind!r} filter shared through Redis yet; shared kinds: "
                f"{', '.join(sorted(REDIS_KINDS))}"
            )
        return REDIS_KINDS[kind](redis_url, name, capacity, error_rate)
    if kind not in LOCAL_KINDS:
        raise ConfigError(f"unknown filter {kind!r}; choose one of {', '.join(LOCAL_KINDS)}")
    rate = DEFAULT_ERROR_RATES[kind] if error_rate is None else error_rate
    if kind == "bloom":
        return _open_bloom(None if state is None else Path(state), capacity, rate)
    if state is None:  # counters in memory (nothing to seal), the library in a temp folder
        folder = Path(tempfile.mkdtemp(prefix="urlseen-"))
        library = SQLiteLibrary(folder / LIBRARY_FILE, create=True)
        return TemporaryExact(ExactFilter(capacity, rate, library=library), folder)
    folder = Path(state)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"state {folder} is a file: the exact filter keeps a folder")
    if (folder / LIBRARY_FILE).exists():
        return ExactFilter.open(folder)
    return ExactFilter.create(folder, capacity, rate)


def _open_bloom(state: Path | None, capacity: int, rate: float) -> BloomFilter:
    if state is None:
        return BloomFilter(capacity, rate)
    path = state / BLOOM_STATE_FILE if state.is_dir() else state
    if path.exists():
        return BloomFilter.open(path)
    return BloomFilter.create(path, capacity, rate)


class TemporaryExact:
    """An exact filter in a temporary folder, removed when the filter closes."""

    def __init__(self, seen: ExactFilter, folder: Path) -> None:
        self.seen, self.folder = seen, folder

    def add(self, key: Key) -> bool:
        return self.seen.add(key)

    def __contains__(self, key: object) -> bool:
        return key in self.seen

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        return self.seen.add_many(keys)

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        return self.seen.contains_many(keys)

    def __len__(self) -> int:
        return len(self.seen)

    def stats(self) -> FilterStats:
        return self.seen.stats()

    def close(self) -> None:
        try:
            self.seen.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> TemporaryExact:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GroupedAdds:
    """A single-writer exact filter whose adds reach it in groups: one commit per `size` new
    keys (or per `seconds`), not one per request; and a bounded memory of `recent` keys known
    seen, because a crawl meets the same links (menus, indexes) on page after page and each
    would otherwise cost a library look-up.

    Answers stay exact: a key is new unless the filter holds it or it waits in the group.
    What a killed (not closed) process loses is the waiting group: at most `size` keys that
    will be reported new again after a restart, never a key reported seen that was not.

    maybe: a quick test with no false negatives (the exact filter's own counters, in C): a key
    it rules out is new without asking the filter.
    """

    def __init__(
        self,
        seen: SeenFilter,
        size: int = 1024,
        seconds: float = 1.0,
        recent: int = 65536,
        maybe: Callable[[Key], bool] | None = None,
    ) -> None:
        self.seen, self.size, self.seconds, self.recent = seen, size, seconds, recent
        self._maybe = maybe
        self._waiting: dict[Key, None] = {}
        self._recent: OrderedDict[Key, None] = OrderedDict()  # the oldest leaves first
        self._since = time.monotonic()

    def add(self, key: Key) -> bool:
        if key in self._recent or key in self._waiting:
            return False
        if (self._maybe is None or self._maybe(key)) and key in self.seen:
            self._remember(key)
            return False
        self._waiting[key] = None
        if len(self._waiting) >= self.size or time.monotonic() - self._since >= self.seconds:
            self.flush()
        return True

    def _remember(self, key: Key) -> None:
        self._recent[key] = None
        if len(self._recent) > self.recent:
            self._recent.popitem(last=False)  # O(1); deleting a plain dict's first key is not

    def __contains__(self, key: object) -> bool:
        return key in self._recent or key in self._waiting or key in self.seen

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        return [self.add(k) for k in keys]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        return [k in self for k in keys]

    def flush(self) -> None:
        """Commit the waiting keys."""
        if self._waiting:
            self.seen.add_many(list(self._waiting))
            for key in self._waiting:
                self._remember(key)
            self._waiting.clear()
        self._since = time.monotonic()

    def __len__(self) -> int:
        return len(self.seen) + len(self._waiting)

    def stats(self) -> FilterStats:
        return self.seen.stats()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.seen.close()

    def __enter__(self) -> GroupedAdds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def grouped(seen: SeenFilter, size: int) -> GroupedAdds:
    """A local exact filter with grouped adds, its counters as the quick test."""
    exact = seen.seen if isinstance(seen, TemporaryExact) else seen
    maybe = exact.counters.__contains__ if isinstance(exact, ExactFilter) else None
    return GroupedAdds(seen, size, maybe=maybe)


def describe(kind: str, state: Any, redis_url: str | None, name: str) -> str:
    """One phrase for logs: which filter, where."""
    if redis_url is not None:
        return f"{kind} filter {name!r} shared through Redis"
    return f"{kind} filter " + (f"at {state}" if state is not None else "(not persisted)")
