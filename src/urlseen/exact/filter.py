"""ExactFilter: the IMP-CBFilter paper's URL-seen test, which never drops an uncrawled page.

A counting Bloom filter answers most new URLs from memory (some counter is 0: certainly new, no
library I/O); the fingerprint library, which holds the MD5 of every URL seen, decides the rest,
so the answer is exact (the paper's procedure, with its double increment on the false-positive
path fixed: a counter counts each fingerprint once). Deleting keeps the counters exact too: an
unsaturated counter always equals the number of library records that map to it, and saturated
ones are recounted from the library's overflow table.

Duplicates are most of a crawl's stream, and the counting filter sends every one of them to the
library. Three things make them cheap without giving up exactness (benchmarks/exact.py measures
each): a bounded cache of hot fingerprints known to be in the library (csrc/fpcache.h) answers
most duplicates from memory; their reference-count increments wait in the cache and are written
back on eviction or at a checkpoint; and what must go to the library goes as one sorted batch.

The library is the source of truth. Changes reach it first (one transaction per batch), the
counters second; a counter file whose writer did not close it, or that does not match the
library, is rebuilt from the library when it is opened. What a crash can cost: reference-count
increments not yet written back (they only decide how many remove() calls a URL needs), never
a fingerprint reported new.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from urlseen import _core
from urlseen._lifecycle import Closeable
from urlseen.bloom.counting import CountingBloomFilter, make_params
from urlseen.bloom.sizing import DEFAULT_CACHE_ENTRIES
from urlseen.errors import (
    ClosedError,
    ConfigError,
    CountersRebuiltWarning,
    DataChecksumError,
    FormatError,
    InvalidKeyError,
    UncleanShutdownWarning,
)
from urlseen.exact.library_protocol import Changes, FingerprintLibrary, LibraryIO, Record
from urlseen.exact.memory_library import MemoryLibrary
from urlseen.exact.sqlite_library import DEFAULT_CACHE_KIB, SQLiteLibrary
from urlseen.hashes import check_fingerprint
from urlseen.protocol import FilterStats, Key, creator, in_temporary_folder, key_batch
from urlseen.state.format import FLAG_OPEN
from urlseen.state.mmapfile import read_header

LIBRARY_FILE = "library.sqlite"
COUNTERS_FILE = "counters.urlseen"
_KEY_ERRORS = (TypeError, InvalidKeyError, ClosedError)  # raised before anything changed


class ExactFilter(Closeable):
    """IMP-CBFilter: a counting Bloom filter in front of an exact fingerprint library.

    `add` / `add_many` return True exactly once per distinct URL, ever (MD5 collisions aside):
    no false positives, no false negatives. `remove` undoes one add (reference counted),
    `forget` makes a URL new again at once, `forget_older_than` expires URLs for re-crawl.

    Args:
        capacity: distinct URLs the counting filter is sized for (more still work: only the
            share of new URLs that cost a library look-up grows).
        error_rate: the counting filter's false-positive rate at capacity: the share of new
            URLs that need a library look-up. Never a wrong answer.
        counter_bits: 2, 4 (default) or 8 bits per counter.
        k, counters_per_key: override the sizing (the paper's experiment: k=8, 20 per key).
            Without them the counters are in the blocked layout (CountingBloomFilter's
            layout="auto": a key's counters in one 128-byte block, one memory round trip per
            new URL instead of k; ~15% more counters at the default error rate). Counter
            files of the standard layout are read as they are; rebuilt ones become blocked.
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

    commits_after_callback = True  # add_many(before_commit=...) (urlseen.job.dedup relies on it)
    _temporary: Path | None = None  # a folder of its own, removed on close (temporary())

    def __init__(
        self,
        capacity: int,
        error_rate: float = 0.001,
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
        if path is None:
            counters = CountingBloomFilter(
                capacity, error_rate, counter_bits=counter_bits, k=k,
                counters_per_key=counters_per_key, hash=check_fingerprint(hash), layout="auto",
            )  # fmt: skip
            library = library if library is not None else MemoryLibrary()
        elif library is not None:
            raise ConfigError("a filter made in a folder (path) keeps its own library: not both")
        else:
            sizing = {
                "capacity": capacity, "error_rate": error_rate, "counter_bits": counter_bits,
                "k": k, "counters_per_key": counters_per_key,
            }  # fmt: skip
            counters, library = _new_folder(Path(path), sizing, hash, durable, library_cache_kib)
        self._setup(counters, library, cache_entries, write_back, batched_lookups, clock)
        if library.count():
            self._rebuild()

    # -- construction ---------------------------------------------------------------------

    create = creator(
        __init__,
        """A new filter in the directory `path` (created; it must not hold a filter already):
        library.sqlite (the records) and counters.urlseen (the memory-mapped counters). The
        constructor with path=path.

        durable=True makes every batch's commit reach the disk before add_many returns (slower);
        by default a killed process loses nothing and an OS crash may lose the last commits.
        """,
    )

    @classmethod
    def temporary(cls, capacity: int, error_rate: float = 0.001, **options: Any) -> ExactFilter:
        """A filter that persists nothing but keeps its library on disk, in a temporary folder
        removed on close: memory stays bounded however many URLs come. The counters live in
        memory (nothing to seal); options are the constructor's."""

        def make(folder: Path) -> ExactFilter:
            library = SQLiteLibrary(folder / LIBRARY_FILE, create=True)
            library.seal_on_close = False  # thrown away on close
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
            FormatError: library.sqlite or counters.urlseen is damaged or not urlseen's
                (a damaged counters.urlseen can be deleted: open() then rebuilds it, as it
                does for a folder made by FingerprintLibraryFilter).
            StateInUseError: another process has the filter open for writing.
        """
        folder = Path(path)
        if not (folder / LIBRARY_FILE).exists():
            raise FileNotFoundError(f"{folder}: no {LIBRARY_FILE} (not an exact filter's state)")
        library = SQLiteLibrary(
            folder / LIBRARY_FILE, readonly=readonly, durable=durable, cache_kib=library_cache_kib
        )
        try:
            counters, why = cls._open_counters(folder, library, readonly)
        except BaseException:
            library.close()
            raise
        self = cls.__new__(cls)
        self._setup(counters, library, cache_entries, **options)
        if why:
            started = time.perf_counter()
            self._rebuild()
            warnings.warn(
                f"{folder}: counters rebuilt from the library ({why}): {len(self):,} "
                f"fingerprints in {time.perf_counter() - started:.1f} s; nothing was lost",
                CountersRebuiltWarning,
                stacklevel=2,
            )
        if not readonly:
            library.apply(Changes(time.time(), meta={"counters": ""}))  # open: not in sync
        return self

    @staticmethod
    def _open_counters(
        folder: Path, library: SQLiteLibrary, readonly: bool
    ) -> tuple[CountingBloomFilter, str]:
        """The counters and, if they must be rebuilt, why.

        A counter file that is missing, belongs to another library, or whose data fails its
        checksum is replaced by a new one (sized as recorded in the library) and rebuilt; a
        read-only open rebuilds into memory and leaves the file alone. A damaged header is a
        FormatError: nothing can be trusted about that file.
        """
        path = folder / COUNTERS_FILE
        sizing = json.loads(library.get_meta("counter_sizing") or "{}")
        why = ""
        if not path.exists():  # deleted, or a library made by FingerprintLibraryFilter
            why = f"{COUNTERS_FILE} was missing"
            if not sizing:
                sizing = {"capacity": max(2 * library.count(), 1_000_000), "error_rate": 0.001}
        else:
            try:  # a clean file's counters are checked (zlib CRC-32) as it opens
                with _open_quietly(path, readonly=True) as probe:
                    params, damaged = probe.params, False
                    unclean = bool(getattr(probe._store, "unclean", False))
            except DataChecksumError:
                params, unclean, damaged = read_header(path).params, False, True
            if not sizing:  # a folder made before the sizing was recorded
                sizing = {
                    "capacity": params["capacity"], "error_rate": params["error_rate"],
                    "counter_bits": params["counter_bits"], "k": params["k"],
                    "counters_per_key": params["ncounters"] / params["capacity"],
                }  # fmt: skip
            why = _foreign_counters(library, params) or (
                "the counter data failed its checksum" if damaged else ""
            )
            if not why:
                counters = _open_quietly(path, readonly=readonly)
                why = _stale_counters(library, params, unclean)
                if why and readonly:  # rebuild into memory, leave the file alone
                    counters.close()
                    counters = CountingBloomFilter._in_memory(params)
                return counters, why
        if readonly:
            return CountingBloomFilter._in_memory(_sized_params(sizing, library)), why
        return _new_counters(path, library, sizing, overwrite=True), why

    def _setup(
        self,
        counters: CountingBloomFilter,
        library: FingerprintLibrary,
        cache_entries: int,
        write_back: bool = True,
        batched_lookups: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if getattr(library, "shared", False):  # e.g. stores.redis_library.RedisLibrary
            raise ConfigError(
                "a shared library decides each URL itself (other processes write it, so local "
                "counters can prove nothing): use FingerprintLibraryFilter(library=...)"
            )
        if isinstance(cache_entries, bool) or not isinstance(cache_entries, int):
            raise ConfigError(f"cache_entries must be an int >= 0, not {cache_entries!r}")
        if not 0 <= cache_entries <= 2**32:
            raise ConfigError(f"cache_entries must be in [0, 2**32], not {cache_entries}")
        self._counters = counters
        self._library = library
        self._cache = _core.FingerprintCache(cache_entries) if cache_entries else None
        self._write_back = write_back
        self._batched = batched_lookups
        self._clock = clock
        self._lock = threading.RLock()
        self._dirty = False
        self._max = (1 << counters.counter_bits) - 1
        self._records = library.count()
        counters.count = self._records
        self._carry = _Increments()  # committed increments a failed batch could not write

    # -- the seen-test --------------------------------------------------------------------

    def add(self, key: Key) -> bool:
        """Check-and-add one URL: True if it was never seen (or was forgotten). One library
        transaction per call: use add_many for throughput."""
        return self.add_many([key])[0]

    def add_many(
        self,
        keys: Iterable[Key],
        *,
        before_commit: Callable[[list[bool]], None] | None = None,
    ) -> list[bool]:
        """Check-and-add a batch, in order; element i is True if key i is new. A key repeated
        in the batch is new only the first time. One library transaction for the batch.

        before_commit(flags) runs after the answers are known and before the library commits
        them: a caller that writes the new URLs out there never has the state ahead of its
        output (`urlseen dedup --state`). If it raises, nothing is committed.
        """
        return self._add_batch(
            lambda cache, stamp: self._counters._exact_step(keys, cache, stamp), before_commit
        )

    def _add_engine_batch(
        self,
        engine: _core.LineEngine,
        *,
        before_commit: Callable[[list[bool]], object] | None = None,
    ) -> list[bool]:
        """add_many of the line engine's current batch, its keys hashed from the engine's own
        buffers (`urlseen dedup`: no Python object per line)."""
        return self._add_batch(
            lambda cache, stamp: engine.exact_step(self._counters, cache, stamp), before_commit
        )

    def _add_batch(
        self,
        run_step: Callable[[_core.FingerprintCache | None, int], _core.ExactStepResult],
        before_commit: Callable[[list[bool]], object] | None,
    ) -> list[bool]:
        """add_many's work once the keys are known: run_step(cache, stamp) is the C step on
        them (CountingFilter._exact_step), the rest settles its answers with the library."""
        with self._lock:
            self._usable()
            self._counters.check_store()  # a counter file cut short: FormatError, not SIGBUS
            now = self._clock()
            stamp = _seconds(now)
            cache = self._cache
            try:
                step = run_step(cache, stamp)
                flags, fresh, ask = step.answers, step.new_fingerprints, step.undecided
                spills, events = step.evicted, step.counter_overflows
            except _KEY_ERRORS:
                raise
            except BaseException:
                self._dirty = True
                raise
            increments = self._carry.copy()
            try:
                with self._library.transaction():
                    increments.add_entries(spills)
                    if ask:
                        self._resolve(ask, flags, fresh, increments, events, stamp)
                    overflow = self._overflow_after_adds(events)
                    answers = cast("list[bool]", flags)  # every None was resolved above
                    if before_commit is not None:
                        before_commit(answers)
                    changes = Changes(now, inserts=fresh, overflow=overflow, known_absent=True)
                    increments.fill(changes)
                    self._library.apply(changes)
            except BaseException:
                self._undo(fresh, spills)
                raise
            self._carry = _Increments()
            if cache is not None:
                self._carry.add_entries(cache.commit())  # overflowing pending counts
                if not self._write_back:
                    self._checkpoint()
            self._records += len(fresh)
            self._counters.count = self._records
            return answers

    def _resolve(
        self,
        ask: list[tuple[int, bytes]],
        flags: list[bool | None],
        fresh: list[bytes],
        increments: _Increments,
        events: list[tuple[int, int]],
        stamp: int,
    ) -> None:
        """Decide the URLs the counters and the cache could not: one library look-up."""
        # The asked fingerprints new earlier in this batch (only those are ever looked up in
        # it: a set of the few asked ones, not of the batch's many new ones).
        batch_new = {fp for _, fp in ask}.intersection(fresh)
        unknown = list(dict.fromkeys(fp for _, fp in ask if fp not in batch_new))
        present = self._library.present(unknown, batched=self._batched)
        cache = self._cache
        for pos, fp in ask:
            if fp in present or fp in batch_new:
                flags[pos] = False
                if cache is None:
                    increments.add(fp, 1, stamp)
                elif not cache.hit(fp, stamp):
                    evicted = cache.insert(fp, 1, stamp)
                    if evicted is not None:
                        increments.add(evicted[0], evicted[1] + evicted[2], evicted[3])
            else:  # a false positive of the counters: new after all
                flags[pos] = True
                batch_new.add(fp)
                fresh.append(fp)
                events.extend(self._counters._add_digests([fp]))
                if cache is not None:
                    evicted = cache.insert(fp, 0, stamp)
                    if evicted is not None:
                        increments.add(evicted[0], evicted[1] + evicted[2], evicted[3])

    def _overflow_after_adds(self, events: list[tuple[int, int]]) -> dict[int, int | None]:
        """True counts of the counters that saturated, kept up to date so that
        a delete can recount them without scanning the library."""
        if not events:
            return {}
        deltas: defaultdict[int, int] = defaultdict(int)
        for index, delta in events:
            deltas[index] += delta
        rows = self._library.overflow(deltas)
        return {index: rows.get(index, 0) + delta for index, delta in deltas.items()}

    def _undo(self, fresh: list[bytes], spills: list[tuple[bytes, int, int, int]]) -> None:
        """A batch failed after the counters changed: they are ahead of the library, and the
        cache holds fingerprints the library never got. Rebuild before the next operation;
        drop the batch's increments, keep the committed ones it evicted for the next batch."""
        self._dirty = True
        if self._cache is not None:
            self._cache.rollback()
            for fp in fresh:
                self._cache.take(fp)
            for fp, pending, _batch, seen in spills:
                if pending:
                    self._carry.add(fp, pending, seen)

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        """Whether each key was seen; never writes. Counter-negative keys cost no library I/O."""
        keys = key_batch(keys)
        with self._lock:
            self._usable()
            maybe = self._counters.contains_many(keys)
            candidates = {i: self._counters._digest(keys[i]) for i, m in enumerate(maybe) if m}
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
        return [self._counters._digest(key) for key in key_batch(keys)]

    def _drop(self, fps: list[bytes], *, purge: bool) -> list[bool]:
        with self._lock:
            self._usable()
            self._counters.check_store()
            cache, pending, taken = self._cache, {}, {}
            for fp in set(fps):
                entry = cache.take(fp) if cache is not None else None
                if entry is not None:
                    taken[fp] = entry
                pending[fp] = (entry[0] if entry else 0) + self._carry.pop(fp)
            try:
                with self._library.transaction():
                    stored = self._library.records(fps)
                    refs = {fp: rec.refs + pending.get(fp, 0) for fp, rec in stored.items()}
                    result, dropped = [], []
                    for fp in fps:
                        if refs.get(fp, 0) <= 0:
                            result.append(False)
                            continue
                        result.append(True)
                        refs[fp] = 0 if purge else refs[fp] - 1
                        if refs[fp] == 0:
                            dropped.append(fp)
                    gone = set(dropped)
                    changes = Changes(
                        self._clock(),
                        deletes=dropped,
                        refs={
                            fp: refs[fp] - rec.refs
                            for fp, rec in stored.items()
                            if fp not in gone and refs[fp] != rec.refs
                        },
                    )
                    changes.overflow, recounted = self._recount(dropped)
                    self._library.apply(changes)
            except BaseException:
                for fp, count in pending.items():
                    self._carry.add(fp, count, taken[fp][2] if fp in taken else 0)
                if cache is not None:
                    for fp, (_pending, _batch, seen) in taken.items():
                        cache.insert(fp, 0, seen)
                raise
            try:  # committed: now the counters follow
                self._counters._remove_digests(dropped)
                for index, value in recounted:
                    self._counters._set(index, value)
            except BaseException:
                self._dirty = True
                raise
            self._records -= len(dropped)
            self._counters.count = self._records
            return result

    def _recount(self, dropped: list[bytes]) -> tuple[dict[int, int | None], list[tuple[int, int]]]:
        """Decrements for a batch of dropped records: each saturated counter is recounted once,
        from the overflow table (the true count), not by scanning the library."""
        occurrences: Counter[int] = Counter()
        for fp in dropped:
            occurrences.update(self._counters._indices(fp))
        saturated = [i for i in occurrences if self._counters._get(i) == self._max]
        rows = self._library.overflow(saturated)
        overflow: dict[int, int | None] = {}
        recounted = []
        for index in saturated:
            if index not in rows:
                self._dirty = True
                raise FormatError(
                    f"counter {index} is saturated but the library has no true count for it; "
                    "the counters will be rebuilt from the library"
                )
            true = rows[index] - occurrences[index]
            overflow[index] = true if true >= self._max else None
            if true < self._max:
                recounted.append((index, true))
        return overflow, recounted

    def refs(self, key: Key) -> int:
        """How many times key was added since it was last new (0 if it is not in)."""
        fp = self._counters._digest(key)
        with self._lock:
            self._usable()
            record: Record | None = self._library.records([fp]).get(fp)
            pending = self._carry.count(fp)
            if self._cache is not None:
                entry = self._cache.take(fp)
                if entry is not None:
                    pending += entry[0]
                    self._cache.insert(fp, 0, entry[2], entry[0])  # room: nothing is evicted
            return (record.refs if record else 0) + pending

    # -- consistency, persistence ------------------------------------------------------------

    def _rebuild(self) -> None:
        """Counters and overflow table from the library: O(records), the recovery path."""
        counters = self._counters
        counters._zero()
        totals: defaultdict[int, int] = defaultdict(int)
        for chunk in self._library.fingerprints():
            for index, delta in counters._add_digests(chunk):
                totals[index] += delta
        self._records = self._library.count()
        counters.count = self._records
        if not self._library.readonly:
            self._library.replace_overflow(dict(totals), {"counters": ""})
        self._dirty = False

    def _usable(self) -> None:
        super()._usable()
        if self._dirty and not self._library.readonly:
            self._rebuild()

    def _checkpoint(self) -> None:
        """Write back every committed increment waiting in the cache (and the carry)."""
        if self._library.readonly:
            return
        increments = self._carry.copy()
        if self._cache is not None:
            for fp, pending, _batch, seen in self._cache.drain():
                increments.add(fp, pending, seen)
        if increments:
            changes = Changes(self._clock())
            increments.fill(changes)
            try:
                self._library.apply(changes)
            except BaseException:
                self._carry = increments  # nothing lost: the next batch writes them
                raise
        self._carry = _Increments()

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
                shutil.rmtree(self._temporary, ignore_errors=True)

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
            cache_bytes = self._cache.nbytes if self._cache is not None else 0
            return FilterStats(
                kind="exact",
                capacity=c.capacity,
                count=self._records,
                bits=c.bits + cache_bytes * 8,
                error_rate=0.0,
                estimated_error_rate=0.0,
                details={
                    **c.details,
                    "filter_error_rate": c.error_rate,
                    "filter_estimated_error_rate": c.estimated_error_rate,
                    "counter_bytes": c.bits // 8,
                    "cache_entries": self._cache.entries if self._cache is not None else 0,
                    "cache_bytes": cache_bytes,
                    "library": self._library.path,
                    "library_io": vars(self._library.io).copy(),
                },
            )

    def __repr__(self) -> str:
        if self.closed:
            return f"<{type(self).__name__} closed>"
        where = f" library={self._library.path!r}" if self._library.path else ""
        return f"<{type(self).__name__} count={self._records}{where}>"


class _Increments:
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

    def add_entries(self, entries: Iterable[tuple[bytes, int, int, int]]) -> None:
        """add() for each cache entry (fingerprint, pending, batch, seen), in C: no Python work
        per entry (a batch evicts up to one entry per new URL)."""
        _core.fold_entries(self._counts, self._seen, entries)

    def count(self, fp: bytes) -> int:
        return self._counts.get(fp, 0)

    def pop(self, fp: bytes) -> int:
        self._seen.pop(fp, None)
        return self._counts.pop(fp, 0)

    def copy(self) -> _Increments:
        other = _Increments()
        other._counts.update(self._counts)
        other._seen.update(self._seen)
        return other

    def fill(self, changes: Changes) -> None:
        changes.refs = dict(self._counts)
        changes.seen = dict(self._seen)  # whole seconds, never 0 (add keeps later times only)

    def __bool__(self) -> bool:
        return bool(self._counts)


def _seconds(timestamp: float) -> int:
    """A time as the cache keeps it: whole Unix seconds in [0, 2**32)."""
    return min(max(int(timestamp), 0), 2**32 - 1)


def _open_quietly(path: Path, *, readonly: bool) -> CountingBloomFilter:
    """Open a counter file; an unclean one is not warned about (the caller rebuilds it)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UncleanShutdownWarning)
            return CountingBloomFilter.open(path, readonly=readonly)
    except DataChecksumError:
        raise  # the header is sound: the caller rebuilds the counters
    except FormatError as exc:
        raise FormatError(f"{exc} (delete it to rebuild it from the library)") from exc


def _sized_params(sizing: dict[str, Any], library: FingerprintLibrary) -> dict[str, Any]:
    return make_params(
        sizing["capacity"], sizing["error_rate"], sizing.get("counter_bits", 4), sizing.get("k"),
        sizing.get("counters_per_key"), 0, library.get_meta("fingerprint") or "md5", "auto",
    )  # fmt: skip


def _new_folder(
    folder: Path, sizing: dict[str, Any], hash: str, durable: bool, library_cache_kib: int
) -> tuple[CountingBloomFilter, SQLiteLibrary]:
    """The counters and library of a new filter in `folder` (created; FileExistsError if it
    holds either already); the library records the counters' sizing.

    The library appears whole (built under another name, then linked into place; an empty one
    left by an older urlseen's interrupted creation is made again), then the counters: a
    creation killed in between leaves a library whose missing counters open() rebuilds."""
    folder.mkdir(parents=True, exist_ok=True)
    SQLiteLibrary.remove_half_made(folder / LIBRARY_FILE)
    for name in (LIBRARY_FILE, COUNTERS_FILE):
        if (folder / name).exists():
            raise FileExistsError(f"{folder / name} exists: open it, or choose a new folder")
    library = SQLiteLibrary(
        folder / LIBRARY_FILE, create=True, durable=durable, cache_kib=library_cache_kib,
        fingerprint=check_fingerprint(hash), meta={"counter_sizing": json.dumps(sizing)},
    )  # fmt: skip
    try:
        counters = _new_counters(folder / COUNTERS_FILE, library, sizing)
    except BaseException:
        library.seal_on_close = False
        library.close()
        (folder / LIBRARY_FILE).unlink(missing_ok=True)
        raise
    return counters, library


def _new_counters(
    path: Path, library: FingerprintLibrary, sizing: dict[str, Any], *, overwrite: bool = False
) -> CountingBloomFilter:
    """A counter file for this library (empty: the caller adds or rebuilds)."""
    params = _sized_params(sizing, library)
    params.update(counters_id=uuid.uuid4().hex, library_id=library.get_meta("library_id") or "")
    return CountingBloomFilter._create_file(path, params, overwrite)


def _foreign_counters(library: FingerprintLibrary, params: dict[str, Any]) -> str:
    """Why a counter file cannot describe this library at all, or "" if it may."""
    if params.get("library_id") != library.get_meta("library_id"):
        return "the counter file belongs to another library"
    if params.get("hash") != library.get_meta("fingerprint"):
        return "the counter file uses another fingerprint"
    return ""


def _stale_counters(library: FingerprintLibrary, params: dict[str, Any], unclean: bool) -> str:
    """Why this library's counter file may disagree with it, or "" if it is in sync: it is
    trusted only if its writer closed it and the library recorded that close."""
    if unclean:
        return "the last writer did not close it"
    if library.get_meta("counters") != params.get("counters_id"):
        return "the library changed since the counters were saved"
    return ""


def describe_state(path: str | os.PathLike[str], verify: bool = False) -> dict[str, Any]:
    """What an exact (or library-only) filter's folder holds, read-only: nothing is rebuilt or
    changed, so a crawler may be using it; only headers are read. verify=True also checks the
    library's integrity and its bytes against its seal, and the counters' data against their
    checksum (FormatError if one fails; a check that cannot be made, because a writer has the
    file open or did not close it, is reported as None)."""
    folder = Path(path)
    library = SQLiteLibrary(folder / LIBRARY_FILE, readonly=True, check_seal=verify)
    try:
        counters_path = folder / COUNTERS_FILE
        desc: dict[str, Any] = {
            "path": os.fspath(path),
            "kind": "exact" if counters_path.exists() else "library",
            "records": library.count(),
            "fingerprint": library.get_meta("fingerprint"),
            "library_bytes": sum(os.path.getsize(f) for f in library.files()),
        }
        if verify:
            desc["library_verified"] = library.verify() or None
        if not counters_path.exists():
            return desc
        try:
            header = read_header(counters_path)
        except FormatError as exc:
            raise FormatError(f"{exc} (delete it to rebuild it from the library)") from exc
        params, unclean = header.params, bool(header.flags & FLAG_OPEN)
        why = _foreign_counters(library, params) or _stale_counters(library, params, unclean)
        desc.update(
            {
                "counters_closed_cleanly": not unclean,
                "counters_in_sync": not why,
                **{
                    name: params.get(name)
                    for name in ("capacity", "error_rate", "ncounters", "counter_bits", "k")
                },
                "counter_bytes": header.data_length,
            }
        )
        if verify and unclean:  # a writer has it (or had it): no checksum to compare yet
            desc["counters_verified"] = None
        elif verify:
            try:  # opening a cleanly closed file checks its data
                with _open_quietly(counters_path, readonly=True) as counters:
                    desc["counters_verified"] = counters.verify() or None
            except DataChecksumError as exc:
                raise FormatError(f"{exc} (the next writer rebuilds it from the library)") from exc
        return desc
    finally:
        library.close()
