"""Reference-count increments the exact filter has not written to its library yet.

Duplicates are most of a crawl's stream. A bounded cache of hot fingerprints known to be in the
library (csrc/fpcache.h) answers most of them from memory, and their increments wait in the
cache until the entry is evicted or a checkpoint drains it; an increment whose batch committed
but whose write failed is carried to the next batch. They only decide how many remove() calls
a URL needs, so losing them in a crash never makes a URL new.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from urlseen import _core
from urlseen.errors import ConfigError
from urlseen.exact.library_protocol import Changes, FingerprintLibrary

Entry = tuple[bytes, int, int, int]  # an evicted cache entry: fingerprint, pending, batch, seen


class Increments:
    """Reference-count increments on their way to the library, with when each fingerprint was
    last seen (Unix seconds)."""

    def __init__(self) -> None:
        self._counts: defaultdict[bytes, int] = defaultdict(int)
        self._seen: dict[bytes, int] = {}

    def add(self, fp: bytes, count: int, seen: int) -> None:
        if count:
            self._counts[fp] += count
            if seen > self._seen.get(fp, 0):
                self._seen[fp] = seen

    def add_evicted(self, evicted: Entry | None) -> None:
        """What the cache evicted to make room (its pending and batch increments), if any."""
        if evicted is not None:
            self.add(evicted[0], evicted[1] + evicted[2], evicted[3])

    def drain(self, cache: _core.FingerprintCache) -> None:
        """Every committed increment the cache holds, folded in here in C (its pending counts
        reset): a checkpoint drains one entry per URL repeated since the last."""
        cache.drain_into(self._counts, self._seen)

    def add_entries(self, entries: Iterable[Entry]) -> None:
        """add() for each cache entry (fingerprint, pending, batch, seen), in C: no Python work
        per entry (a batch evicts up to one entry per new URL)."""
        _core.fold_entries(self._counts, self._seen, entries)

    def count(self, fp: bytes) -> int:
        return self._counts.get(fp, 0)

    def pop(self, fp: bytes) -> int:
        self._seen.pop(fp, None)
        return self._counts.pop(fp, 0)

    def copy(self) -> Increments:
        other = Increments()
        other._counts.update(self._counts)
        other._seen.update(self._seen)
        return other

    def fill(self, changes: Changes) -> None:
        changes.refs = dict(self._counts)
        changes.seen = dict(self._seen)  # whole seconds, never 0 (add keeps later times only)

    def __bool__(self) -> bool:
        return bool(self._counts)


class PendingRefs:
    """The hot-fingerprint cache (None with 0 entries) and the increments carried over."""

    def __init__(self, cache_entries: int) -> None:
        if isinstance(cache_entries, bool) or not isinstance(cache_entries, int):
            raise ConfigError(f"cache_entries must be an int >= 0, not {cache_entries!r}")
        if not 0 <= cache_entries <= 2**32:
            raise ConfigError(f"cache_entries must be in [0, 2**32], not {cache_entries}")
        self.cache = _core.FingerprintCache(cache_entries) if cache_entries else None
        self._carry = Increments()  # committed increments a failed write could not store

    # -- a check-and-add batch ---------------------------------------------------------

    def batch_increments(self, evicted: Iterable[Entry]) -> Increments:
        """The increments a batch writes: the carried ones and what its step evicted."""
        increments = self._carry.copy()
        increments.add_entries(evicted)
        return increments

    def duplicate(self, fp: bytes, stamp: int, increments: Increments) -> None:
        """fp was found in the library: one more reference, kept in the cache if it can be."""
        cache = self.cache
        if cache is None:
            increments.add(fp, 1, stamp)
        elif not cache.hit(fp, stamp):
            increments.add_evicted(cache.insert(fp, 1, stamp))

    def inserted(self, fp: bytes, stamp: int, increments: Increments) -> None:
        """fp is new to the library: cache it as known."""
        if self.cache is not None:
            increments.add_evicted(self.cache.insert(fp, 0, stamp))

    def committed(self) -> None:
        """The batch's increments are in the library; the cache's batch counts become
        pending (those that would overflow an entry are carried)."""
        self._carry = Increments()
        if self.cache is not None:
            self._carry.add_entries(self.cache.commit())

    def rolled_back(self, fresh: list[bytes], evicted: list[Entry]) -> None:
        """The batch failed: drop its increments and the fingerprints it cached as new; keep
        the committed increments it evicted for the next batch."""
        if self.cache is not None:
            self.cache.rollback()
            for fp in fresh:
                self.cache.take(fp)
            for fp, pending, _batch, seen in evicted:
                if pending:
                    self._carry.add(fp, pending, seen)

    # -- deletes, look-ups, checkpoints --------------------------------------------------

    def take(self, fps: Iterable[bytes]) -> tuple[dict[bytes, int], dict[bytes, int]]:
        """Take the pending increments of fps out (a delete settles them in its own write):
        (fingerprint -> pending increments, fingerprint -> last seen, for those cached)."""
        pending, seen = {}, {}
        for fp in set(fps):
            entry = self.cache.take(fp) if self.cache is not None else None
            if entry is not None:
                seen[fp] = entry[2]
            pending[fp] = (entry[0] if entry else 0) + self._carry.pop(fp)
        return pending, seen

    def put_back(self, pending: dict[bytes, int], seen: dict[bytes, int]) -> None:
        """Undo take(): the delete failed."""
        for fp, count in pending.items():
            self._carry.add(fp, count, seen.get(fp, 0))
        if self.cache is not None:
            for fp, when in seen.items():
                self.cache.insert(fp, 0, when)

    def count(self, fp: bytes) -> int:
        """Increments of fp not yet in the library."""
        pending = self._carry.count(fp)
        if self.cache is not None:
            entry = self.cache.take(fp)
            if entry is not None:
                pending += entry[0]
                self.cache.insert(fp, 0, entry[2], entry[0])  # room: nothing is evicted
        return pending

    def checkpoint(self, library: FingerprintLibrary, clock: Callable[[], float]) -> None:
        """Write every pending increment (the carried ones and all the cache holds) to the
        library; if that fails, they are carried to the next batch: nothing is lost."""
        increments = self._carry.copy()
        if self.cache is not None:
            try:
                increments.drain(self.cache)
            except BaseException:
                self._carry = increments  # what was drained before the error
                raise
        if increments:
            changes = Changes(clock())
            increments.fill(changes)
            try:
                library.apply(changes)
            except BaseException:
                self._carry = increments
                raise
        self._carry = Increments()

    @property
    def nbytes(self) -> int:
        return self.cache.nbytes if self.cache is not None else 0

    @property
    def entries(self) -> int:
        return self.cache.entries if self.cache is not None else 0


def seconds(timestamp: float) -> int:
    """A time as the cache keeps it: whole Unix seconds in [0, 2**32)."""
    return min(max(int(timestamp), 0), 2**32 - 1)
