"""ExactFilter: the IMP-CBFilter paper's URL-seen test, which never drops an uncrawled page.

A counting Bloom filter answers most new URLs from memory (some counter is 0: certainly new, no
library I/O); the fingerprint library, which holds the MD5 of every URL seen, decides the rest,
so the answer is exact (the paper's procedure, a counter counting each fingerprint once).
Deleting keeps the counters exact too: an unsaturated counter always equals the number of
library records that map to it, and saturated ones are recounted (exact/batches.py).

Duplicates are most of a crawl's stream, and the counting filter sends every one of them to the
library: a cache of hot fingerprints answers most of them from memory (exact/pending_refs.py),
and what must go to the library goes as one sorted batch (measured by benchmarks/exact/exact.py).

The library is the source of truth. Changes reach it first (one transaction per batch), the
counters second; a counter file whose writer did not close it, or that does not match the
library, is rebuilt from the library when it is opened (exact/folder.py). What a crash can
cost: reference-count increments not yet written back, never a fingerprint reported new.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from urlseen import _core, defaults
from urlseen._lifecycle import Closeable
from urlseen.bloom.counting import CountingBloomFilter
from urlseen.bloom.sizing import DEFAULT_CACHE_ENTRIES
from urlseen.errors import ClosedError, FormatError, InvalidKeyError
from urlseen.exact import batches, folder, growth
from urlseen.exact.library_protocol import Changes, FingerprintLibrary, LibraryIO, Record
from urlseen.exact.pending_refs import PendingRefs, seconds
from urlseen.exact.sqlite_library import DEFAULT_CACHE_KIB
from urlseen.protocol import (
    Batch,
    CommitAfterWrite,
    FilterStats,
    Key,
    creator,
    in_temporary_folder,
    key_batch,
    remove_temporary,
)

_RATE = defaults.EXACT_ERROR_RATE
_KEY_ERRORS = (TypeError, InvalidKeyError, ClosedError)  # raised before anything changed


class ExactFilter(CommitAfterWrite, Closeable):
    """IMP-CBFilter: a counting Bloom filter in front of an exact fingerprint library.

    `add` / `add_many` return True exactly once per distinct URL, ever (MD5 collisions aside):
    no false positives, no false negatives. `remove` undoes one add (reference counted),
    `forget` makes a URL new again at once, `forget_older_than` expires URLs for re-crawl.

    Args:
        capacity: distinct URLs the counting filter is sized for (more still work: a larger
            share of new URLs costs a library look-up); None (default): counters that grow.
        error_rate: the counting filter's false-positive rate at capacity: the share of new
            URLs that need a library look-up. Never a wrong answer.
        counter_bits: 2, 4 (default) or 8 bits per counter.
        k, counters_per_key: override the sizing (the paper's experiment: k=8, 20 per key);
            without them the counters take the blocked layout (CountingBloomFilter's
            layout="auto": one memory round trip per new URL instead of k).
        hash: fingerprint, "md5" (default, as the paper) or "xxh3_128" (faster).
        cache_entries: hot fingerprints kept in memory (32 bytes each); 0 disables the cache.
        library: where the records live; default an in-memory one. ExactFilter.create/open
            use a SQLite file.
        write_back: keep duplicates' reference-count increments in the cache until eviction
            or a checkpoint (default); False writes them with every batch.
        batched_lookups: look a batch's unknown URLs up in one sorted statement (default);
            False asks the library once per distinct unknown URL of a batch, in order, as
            near the paper's method as a batched transaction gets.
        clock: the time source for first/last-seen times (tests pass a fake one).
        path: keep the filter in this folder (created; it must not hold a filter already), as
            create() does: a SQLite library and a counter file. Not with `library`.
        durable: with path, every batch's commit reaches the disk before add_many returns.
        library_cache_kib: with path, the SQLite page cache of the library.

    Example:
        >>> seen = ExactFilter(capacity=1000)
        >>> seen.add_many(["https://a.example/", "https://b.example/", "https://a.example/"])
        [True, True, False]
        >>> seen.forget("https://a.example/"), seen.add("https://a.example/")
        (True, True)
    """

    _temporary: Path | None = None  # a folder of its own, removed on close (temporary())

    def __init__(
        self,
        capacity: int | None = None,
        error_rate: float = _RATE,
        *,
        counter_bits: int = 4,
        k: int | None = None,
        counters_per_key: float | None = None,
        hash: str = "md5",
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        library: FingerprintLibrary | None = None,
        write_back: bool = True,
        batched_lookups: bool = True,
        clock: Callable[[], float] = time.time,
        path: str | os.PathLike[str] | None = None,
        durable: bool = False,
        library_cache_kib: int = DEFAULT_CACHE_KIB,
    ) -> None:
        size = growth.sizing(capacity, error_rate, counter_bits, k, counters_per_key)
        counters, library = folder.new_state(size, hash, path, library, durable, library_cache_kib)
        self._setup(counters, library, cache_entries, write_back, batched_lookups, clock)
        if library.count():
            self._rebuild()

    create = creator(
        __init__,
        """A new filter in the folder `path` (library.sqlite, counters.urlseen; it must not hold a
        filter already): the constructor with path=path. durable=True: each batch's commit
        reaches the disk before add_many returns; else an OS crash may lose the last ones.""",
    )

    @classmethod
    def temporary(
        cls, capacity: int | None = None, error_rate: float = _RATE, **options: Any
    ) -> ExactFilter:
        """A filter that keeps its library on disk in a temporary folder removed on close (memory
        bounded however many URLs come) and its counters in memory; options: the constructor's."""

        def make(where: Path) -> ExactFilter:
            library = folder.throwaway_library(where, options.get("hash", "md5"))
            return cls(capacity, error_rate, library=library, **options)

        return in_temporary_folder(make)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        durable: bool = False,
        library_cache_kib: int = DEFAULT_CACHE_KIB,
        **options: Any,
    ) -> ExactFilter:
        """Open a filter made by create(). The counters are checked against the library and
        rebuilt from it if they may disagree (CountersRebuiltWarning says so).

        Raises:
            FormatError: library.sqlite or counters.urlseen is damaged or not urlseen's (a
                damaged counters.urlseen can be deleted: open() then rebuilds it).
            StateInUseError: another process has the filter open for writing.
        """
        counters, library, why = folder.open_folder(
            Path(path), readonly=readonly, durable=durable, library_cache_kib=library_cache_kib
        )
        self = cls.__new__(cls)
        self._setup(counters, library, cache_entries, **options)
        if why:
            folder.rebuild_with_warning(Path(path), why, self._rebuild)
        if not readonly:
            library.apply(Changes(time.time(), meta={"counters": ""}))  # open: not in sync
        return self

    def _setup(
        self,
        counters: CountingBloomFilter,
        library: FingerprintLibrary,
        cache_entries: int,
        write_back: bool = True,
        batched_lookups: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._pending = PendingRefs(cache_entries)
        self._counters = counters
        self._library = library
        self._write_back = write_back
        self._batched = batched_lookups
        self._clock = clock
        self._lock = threading.RLock()
        self._dirty = False
        self._records = library.count()
        counters.count = self._records
        self._grows = growth.grows(library)  # counters replaced as the library outgrows them

    # -- the seen-test --------------------------------------------------------------------

    def add(self, key: Key) -> bool:
        """Check-and-add one URL: True if it was never seen (or was forgotten). One library
        transaction per call: use add_many for throughput."""
        return self.add_many([key])[0]

    def add_many(
        self,
        keys: Iterable[Key],
        *,
        before_commit: Callable[[list[bool]], object] | None = None,
    ) -> list[bool]:
        """Check-and-add a batch, in order; element i is True if key i is new. A key repeated
        in the batch is new only the first time. One library transaction for the batch.

        before_commit(flags) runs after the answers are known and before the library commits
        them: a caller that writes the new URLs out there never has the state ahead of its
        output (`urlseen dedup --state`). If it raises, nothing is committed.
        """
        return self._add_batch(
            lambda cache, stamp: self._counters.screen(keys, cache, stamp), before_commit
        )[0]

    def dedup_hasher(self) -> CountingBloomFilter | None:
        return self._counters if type(self).add_many is ExactFilter.add_many else None

    def dedup_step(
        self, batch: Batch, write: Callable[[list[bool] | None], object], transactional: bool
    ) -> int | None:
        """add_many with before_commit=write (protocol.DedupStep), hashed from the engine's own
        buffers: no Python object per line. The counters are read per batch: they may grow."""
        if isinstance(batch, list):
            return super().dedup_step(batch, write, transactional)
        if type(self).add_many is not ExactFilter.add_many:
            return None  # a subclass's own add_many: the job hands the keys over as a list
        return self._add_batch(
            lambda cache, stamp: batch.exact_step(self._counters, cache, stamp), write
        )[1]

    def _add_batch(
        self,
        run_step: Callable[[_core.FingerprintCache | None, int], _core.ExactStepResult],
        before_commit: Callable[[list[bool]], object] | None,
    ) -> tuple[list[bool], int]:
        """add_many's work once the keys are known: run_step(cache, stamp) is the C step on
        them, the rest settles its answers with the library. (answers, how many are True)."""
        with self._lock:
            self._usable()
            self._counters.check_store()  # a counter file cut short: FormatError, not SIGBUS
            if self._grows and self._records > self._counters.capacity:
                self._dirty = True  # until the larger counters are in place
                self._counters, self._dirty = growth.grow(self._counters, self._library), False
            now = self._clock()
            stamp = seconds(now)
            try:
                step = run_step(self._pending.cache, stamp)
            except BaseException as exc:  # a bad key changed nothing; anything else may have
                self._dirty |= not isinstance(exc, _KEY_ERRORS)
                raise
            flags, fresh, spills = step.answers, step.new_fingerprints, step.evicted
            increments = self._pending.batch_increments(spills)
            try:
                with self._library.transaction():
                    if step.undecided:
                        batches.resolve_undecided(
                            self._library, self._counters, self._pending, step, increments,
                            stamp, batched=self._batched,
                        )  # fmt: skip
                    overflow = batches.overflow_after_adds(self._library, step.counter_overflows)
                    answers = cast("list[bool]", flags)  # every None was resolved above
                    if before_commit is not None:
                        before_commit(answers)
                    changes = Changes(now, inserts=fresh, overflow=overflow, known_absent=True)
                    increments.fill(changes)
                    self._library.apply(changes)
            except BaseException:
                self._dirty = True  # the counters are ahead of the library: rebuilt next
                self._pending.rolled_back(fresh, spills)
                raise
            self._pending.committed()
            if not self._write_back and self._pending.cache is not None:
                self._checkpoint()
            self._records += len(fresh)
            self._counters.count = self._records
            return answers, len(fresh)

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        """Whether each key was seen; never writes. Counter-negative keys cost no library I/O."""
        keys = key_batch(keys)
        with self._lock:
            self._usable()
            maybe = self._counters.contains_many(keys)
            candidates = {i: self._counters.fingerprint(keys[i]) for i, m in enumerate(maybe) if m}
            present = self._library.present(list(dict.fromkeys(candidates.values())))
            return [i in candidates and candidates[i] in present for i in range(len(keys))]

    # -- deletion and expiry ----------------------------------------------------------------

    def remove(self, key: Key) -> bool:
        """Undo one add of key: its reference count drops by one, and at zero the URL is
        forgotten. False if key was not in the filter."""
        return self.remove_many([key])[0]

    def remove_many(self, keys: Iterable[Key]) -> list[bool]:
        return self._drop(self._fingerprints(keys), purge=False)

    def forget(self, key: Key) -> bool:
        """Forget key whatever its reference count (force a re-crawl). False if it was not in."""
        return self.forget_many([key])[0]

    def forget_many(self, keys: Iterable[Key]) -> list[bool]:
        return self._drop(self._fingerprints(keys), purge=True)

    def forget_older_than(self, timestamp: float, *, by: str = "first_seen") -> int:
        """Forget every URL first reported new (by="first_seen") or last seen (by="last_seen")
        before timestamp (Unix seconds): expiry for re-crawl. Returns how many."""
        with self._lock:
            self._usable()
            self._checkpoint()  # last_seen of cached duplicates must be in the library
            old = self._library.older_than(timestamp, by=by)
            for start in range(0, len(old), 65536):
                self._drop(old[start : start + 65536], purge=True)
            return len(old)

    def _fingerprints(self, keys: Iterable[Key]) -> list[bytes]:
        return [self._counters.fingerprint(key) for key in key_batch(keys)]

    def _drop(self, fps: list[bytes], *, purge: bool) -> list[bool]:
        with self._lock:
            self._usable()
            self._counters.check_store()
            pending, seen = self._pending.take(fps)
            try:
                with self._library.transaction():
                    stored = self._library.records(fps)
                    result, changes = batches.plan_drop(
                        fps, stored, pending, purge=purge, now=self._clock()
                    )
                    dropped = changes.deletes
                    try:
                        changes.overflow, recounted = batches.recount_saturated(
                            self._counters, self._library, dropped
                        )
                    except FormatError:
                        self._dirty = True
                        raise
                    self._library.apply(changes)
            except BaseException:
                self._pending.put_back(pending, seen)
                raise
            try:  # committed: now the counters follow
                self._counters.remove_fingerprints(dropped)
                for index, value in recounted:
                    self._counters.set_counter(index, value)
            except BaseException:
                self._dirty = True
                raise
            self._records -= len(dropped)
            self._counters.count = self._records
            return result

    def refs(self, key: Key) -> int:
        """How many times key was added since it was last new (0 if it is not in)."""
        fp = self._counters.fingerprint(key)
        with self._lock:
            self._usable()
            record: Record | None = self._library.records([fp]).get(fp)
            return (record.refs if record else 0) + self._pending.count(fp)

    # -- consistency, persistence ------------------------------------------------------------

    def _rebuild(self) -> int:
        """Counters and overflow table from the library (folder.rebuild_counters); the number
        of records."""
        self._records = folder.rebuild_counters(self._counters, self._library)
        self._dirty = False
        return self._records

    def _usable(self) -> None:
        super()._usable()
        if self._dirty and not self._library.readonly:
            self._rebuild()

    def _checkpoint(self) -> None:
        """Write back every committed increment waiting in the cache (and the carry)."""
        if not self._library.readonly:
            self._pending.checkpoint(self._library, self._clock)

    def flush(self) -> None:
        """Write back pending reference counts and push the counters to disk."""
        with self._lock:
            self._usable()
            self._checkpoint()
            self._counters.flush()

    def close(self) -> None:
        """Write back, seal the counter file, and mark it in sync with the library."""
        with self._lock:  # not while a batch runs
            super().close()

    def _close(self) -> None:
        library, counters = self._library, self._counters
        try:
            if not library.readonly and not self._dirty:
                self._checkpoint()
                counters_id = counters.params.get("counters_id")
                counters.close()  # sealed on disk before the library says "in sync"
                if counters_id:
                    library.apply(Changes(time.time(), meta={"counters": counters_id}))
        finally:
            counters.close()
            library.close()
            if self._temporary is not None:
                remove_temporary(self._temporary)

    def __len__(self) -> int:
        return self._records

    @property
    def library(self) -> FingerprintLibrary:
        return self._library

    @property
    def io(self) -> LibraryIO:
        """The library I/O so far (look-ups, round trips, writes)."""
        return self._library.io

    @property
    def counters(self) -> CountingBloomFilter:
        return self._counters

    def stats(self) -> FilterStats:
        """Records, memory and the counting filter's own rates; O(1)."""
        with self._lock:
            self._usable()
            c = self._counters.stats()
            return FilterStats(
                kind="exact",
                capacity=c.capacity,
                count=self._records,
                bits=c.bits + self._pending.nbytes * 8,
                error_rate=0.0,
                estimated_error_rate=0.0,
                details={
                    **c.details,
                    "filter_error_rate": c.error_rate,
                    "filter_estimated_error_rate": c.estimated_error_rate,
                    "counter_bytes": c.bits // 8,
                    "cache_entries": self._pending.entries,
                    "cache_bytes": self._pending.nbytes,
                    "library": self._library.path,
                    "library_io": self._library.io.as_dict(),
                },
            )

    def __repr__(self) -> str:
        if self.closed:
            return f"<{type(self).__name__} closed>"
        where = f" library={self._library.path!r}" if self._library.path else ""
        return f"<{type(self).__name__} count={self._records}{where}>"
