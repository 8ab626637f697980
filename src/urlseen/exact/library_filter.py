"""FingerprintLibraryFilter: the IMP-CBFilter paper's baseline, the MD5 fingerprint library
alone.

Every URL is looked up in the library; a new one is inserted, a duplicate has its reference
count incremented. Exact, and as slow as the library: this is what IMP-CBFilter (ExactFilter)
is measured against, on the same library. It shares ExactFilter's state folder layout, so a
library made by either can be opened by the other.

With a shared library (library_protocol.SharedLibrary: the Redis one, which urlseen.kinds hands
it) this is the fleet's exact filter: the library's atomic insert-if-absent decides each URL, so
among all processes each distinct URL is new exactly once, and reaches a caller even if the
process it was answered to dies before its caller has it (claims until acknowledge()).
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

from urlseen import _core
from urlseen._lifecycle import Closeable
from urlseen.errors import ConfigError
from urlseen.exact.folder import LIBRARY_FILE
from urlseen.exact.library_protocol import Changes, FingerprintLibrary, LibraryIO, SharedLibrary
from urlseen.exact.memory_library import MemoryLibrary
from urlseen.exact.sqlite_library import DEFAULT_CACHE_KIB, SQLiteLibrary
from urlseen.hashes import FINGERPRINTS, check_fingerprint
from urlseen.protocol import (
    CommitAfterWrite,
    FilterStats,
    Key,
    PassesClaimsOn,
    creator,
    in_temporary_folder,
    key_batch,
    remove_temporary,
)


class FingerprintLibraryFilter(CommitAfterWrite, PassesClaimsOn, Closeable):
    """The exact URL-seen test by fingerprint library alone (the paper's baseline method).

    Args:
        library: where the records live; default in memory. create/open use SQLite. A
            SharedLibrary makes the filter shared (its own fingerprint hash is used).
        hash: "md5" (default, as the paper) or "xxh3_128".
        batched_lookups: one sorted look-up per batch (default); False looks each distinct
            fingerprint of a batch up with its own query, in order, as near the paper's
            one-URL-at-a-time method as a batched transaction gets.
        clock: the time source for first/last-seen times.
        path: keep the records in a new SQLite library in this folder (created), as create()
            does. Not with `library`.
        durable, library_cache_kib: with path, as for ExactFilter.
    """

    _temporary: Path | None = None  # a folder of its own, removed on close (temporary())

    def __init__(
        self,
        *,
        library: FingerprintLibrary | SharedLibrary | None = None,
        hash: str = "md5",
        batched_lookups: bool = True,
        clock: Callable[[], float] = time.time,
        path: str | os.PathLike[str] | None = None,
        durable: bool = False,
        library_cache_kib: int = DEFAULT_CACHE_KIB,
    ) -> None:
        check_fingerprint(hash)
        if path is not None:
            if library is not None:
                raise ConfigError(
                    "a filter made in a folder (path) keeps its own library: not both"
                )
            folder = Path(path)
            folder.mkdir(parents=True, exist_ok=True)
            SQLiteLibrary.remove_half_made(folder / LIBRARY_FILE)  # an interrupted creation's
            library = SQLiteLibrary(
                folder / LIBRARY_FILE,
                create=True,
                durable=durable,
                cache_kib=library_cache_kib,
                fingerprint=hash,
            )
        self._shared = cast(SharedLibrary, library) if getattr(library, "shared", False) else None
        if self._shared is not None:
            hash = self._shared.fingerprint
        # A shared library is only ever asked to claim, look up, count and close.
        self._library = (
            cast(FingerprintLibrary, library) if library is not None else MemoryLibrary()
        )
        self._hash = FINGERPRINTS[hash]
        self._batched = batched_lookups
        self._clock = clock
        self._lock = threading.RLock()
        self._records = self._library.count()

    create = creator(__init__, """A new filter in the folder `path`: library.sqlite.""")

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        durable: bool = False,
        library_cache_kib: int = DEFAULT_CACHE_KIB,
        batched_lookups: bool = True,
    ) -> FingerprintLibraryFilter:
        """Open the library in the folder `path` (made by this class or by ExactFilter)."""
        library = SQLiteLibrary(
            Path(path) / LIBRARY_FILE,
            readonly=readonly,
            durable=durable,
            cache_kib=library_cache_kib,
        )
        try:
            if not readonly:  # an ExactFilter's counters no longer match what we will add
                library.apply(Changes(time.time(), meta={"counters": ""}))
            hash = library.get_meta("fingerprint") or "md5"
            return cls(library=library, hash=hash, batched_lookups=batched_lookups)
        except BaseException:
            library.close()
            raise

    @classmethod
    def temporary(cls, *, hash: str = "md5") -> FingerprintLibraryFilter:
        """A filter that persists nothing but keeps its library on disk, in a temporary folder
        removed on close: memory stays bounded however many URLs come."""

        def make(folder: Path) -> FingerprintLibraryFilter:
            made = cls.create(folder, hash=hash)
            if isinstance(made._library, SQLiteLibrary):
                made._library.seal_on_close = False  # thrown away on close
            return made

        return in_temporary_folder(make)

    def forget_many(self, keys: Iterable[Key]) -> list[bool]:
        """Shared library only: make these URLs new again (True for each one it held)."""
        return self._shared_library("forget").forget(_core.digests(key_batch(keys), self._hash))

    def forget_older_than(self, timestamp: float) -> int:
        """Shared library only: forget URLs first seen before timestamp; how many."""
        return self._shared_library("forget").forget_older_than(timestamp)

    @property
    def auto_acknowledge(self) -> bool:
        """Shared library: True (default) if add_many acknowledges its answers before it
        returns them; False keeps them claimed until acknowledge(). Local: always True."""
        return self._shared is None or self._shared.auto_acknowledge

    @auto_acknowledge.setter
    def auto_acknowledge(self, value: bool) -> None:
        if self._shared is not None:
            self._shared.auto_acknowledge = value

    def acknowledge(self) -> int:
        """Every answer given so far has reached the caller (and is persisted, if the caller
        persists them): a shared library releases their claims (how many another client had
        taken over meanwhile). A local library commits each batch in add_many: nothing to do."""
        with self._lock:
            self._usable()
            return 0 if self._shared is None else self._shared.acknowledge()

    def _claimer(self) -> object:
        return self._shared

    def _shared_library(self, what: str) -> SharedLibrary:
        with self._lock:
            self._usable()
        if self._shared is None:
            raise ConfigError(
                f"{what} needs a shared library or the ExactFilter: a local library-only "
                "filter keeps no counters to update"
            )
        return self._shared

    def add(self, key: Key) -> bool:
        """Check-and-add one URL (one library transaction: use add_many for throughput)."""
        return self.add_many([key])[0]

    def add_many(
        self,
        keys: Iterable[Key],
        *,
        before_commit: Callable[[list[bool]], object] | None = None,
    ) -> list[bool]:
        """Check-and-add a batch in order; one transaction. before_commit as in ExactFilter."""
        fps = _core.digests(keys, self._hash)
        with self._lock:
            self._usable()
            now = self._clock()
            if self._shared is not None:  # one atomic claim decides and commits
                flags = self._shared.claim(fps, now)
                if before_commit is not None:
                    # A shared claim decides and commits in one step, so the callback comes
                    # after it; callers still get the claim's own answers (exactly once).
                    before_commit(flags)
                return flags
            with self._library.transaction():
                present = self._library.present(list(dict.fromkeys(fps)), batched=self._batched)
                inserts: dict[bytes, None] = {}
                refs: defaultdict[bytes, int] = defaultdict(int)
                flags = []
                for fp in fps:
                    fresh = fp not in present and fp not in inserts
                    if fresh:
                        inserts[fp] = None
                    else:
                        refs[fp] += 1
                    flags.append(fresh)
                if before_commit is not None:
                    before_commit(flags)
                self._library.apply(
                    Changes(now, inserts=list(inserts), refs=dict(refs), known_absent=True)
                )
            self._records += len(inserts)
            return flags

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        fps = _core.digests(keys, self._hash)
        with self._lock:
            self._usable()
            present = self._library.present(list(dict.fromkeys(fps)), batched=self._batched)
            return [fp in present for fp in fps]

    def __len__(self) -> int:
        if self._shared is not None:
            return self._shared.count()  # every process adds: ask the library
        return self._records

    @property
    def io(self) -> LibraryIO:
        return self._library.io

    @property
    def library(self) -> FingerprintLibrary | SharedLibrary:
        return self._shared if self._shared is not None else self._library

    def stats(self) -> FilterStats:
        count = len(self)
        capacity = self._shared.params["capacity"] if self._shared is not None else count
        return FilterStats(
            kind="library" if self._shared is None else "redis-library",
            capacity=max(capacity, 1),
            count=count,
            bits=8 * self._stored_bytes(),
            error_rate=0.0,
            estimated_error_rate=0.0,
            details={"library": self._library.path, "library_io": self._library.io.as_dict()},
        )

    def _stored_bytes(self) -> int:
        """What the library takes where it lives: Redis's count for a shared one (estimated
        from 1024 buckets when it has more), the file's (and its WAL's) size for SQLite, 0 in
        memory."""
        if self._shared is not None:
            return self._shared.memory_usage(sample=1024)
        path = self._library.path
        files = [path, f"{path}-wal"] if path else []
        return sum(os.path.getsize(f) for f in files if os.path.exists(f))

    def flush(self) -> None:
        """Every batch is committed when add_many returns: nothing to do."""

    def _close(self) -> None:
        library = getattr(self, "_library", None)  # none if the parameters were refused
        try:
            if library is not None:
                library.close()
        finally:
            if self._temporary is not None:
                remove_temporary(self._temporary)
