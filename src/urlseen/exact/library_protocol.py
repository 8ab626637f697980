"""What a fingerprint library is (FingerprintLibrary, its Record, Changes and LibraryIO): the
exact record of every URL the exact filters have seen.

One record per distinct fingerprint (the 16-byte digest of the canonical URL): its reference
count, when it was first reported new and when it was last seen. The library is the source of
truth of ExactFilter: its counting filter is derived data, rebuilt from the library
whenever the two may disagree. The record does not keep the k counter indices the paper stores:
they are a pure function of the fingerprint and the counter array's (m, k), so they are
recomputed (8 bytes x k saved per record); the one thing the stored indices buy, the true count
of a saturated counter (which a delete needs to decrement it), is kept exactly in a small
`overflow` table instead.

Implementations: MemoryLibrary (tests, small jobs), SQLiteLibrary (the embedded default); a
library several processes write (SharedLibrary: the Redis one urlseen.kinds hands in) decides
each URL itself. Every batch is one round trip: `present` looks a whole batch up, `apply`
writes a whole batch's changes atomically.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

from urlseen._frozen import Record as Fields


class Record(NamedTuple):
    """A library record. Times are Unix seconds (stored with millisecond resolution)."""

    refs: int
    first_seen: float
    last_seen: float


class Changes(Fields):
    """One batch's writes, applied all or nothing by FingerprintLibrary.apply.

    Attributes:
        now: the batch's time (first_seen of inserts, last_seen of reference updates).
        inserts: new fingerprints, each with refs = 1; none may be present already.
        refs: fingerprint -> change of its reference count (present fingerprints only).
        seen: fingerprint -> when it was last seen, for some of `refs` (default: now).
        deletes: fingerprints to remove.
        overflow: counter index -> its new true count, or None to drop the row.
        meta: name -> value to set in the library's metadata.
        known_absent: the caller found every insert absent in this transaction (looked up, or
            proved new by counters that match the library): the library need not look them
            up again (SQLiteLibrary would, in its B-tree, per batch).
    """

    __slots__ = (  # noqa: RUF023
        "now", "inserts", "refs", "seen", "deletes", "overflow", "meta", "known_absent"
    )  # fmt: skip
    now: float
    inserts: list[bytes]
    refs: dict[bytes, int]
    seen: dict[bytes, float]
    deletes: list[bytes]
    overflow: dict[int, int | None]
    meta: dict[str, str]
    known_absent: bool

    def __init__(
        self,
        now: float,
        inserts: list[bytes] | None = None,
        refs: dict[bytes, int] | None = None,
        seen: dict[bytes, float] | None = None,
        deletes: list[bytes] | None = None,
        overflow: dict[int, int | None] | None = None,
        meta: dict[str, str] | None = None,
        known_absent: bool = False,
    ) -> None:
        self._init(
            now,
            [] if inserts is None else inserts,
            {} if refs is None else refs,
            {} if seen is None else seen,
            [] if deletes is None else deletes,
            {} if overflow is None else overflow,
            {} if meta is None else meta,
            known_absent,
        )

    def __bool__(self) -> bool:
        return bool(self.inserts or self.refs or self.deletes or self.overflow or self.meta)


class LibraryIO(Fields):
    """Logical library I/O so far: what the paper's experiment counts per URL.

    lookups: fingerprints looked up; round_trips: lookup and write statements or batches sent;
    writes: records inserted, updated or deleted.
    """

    __slots__ = ("lookups", "round_trips", "writes")
    lookups: int
    round_trips: int
    writes: int

    def __init__(self, lookups: int = 0, round_trips: int = 0, writes: int = 0) -> None:
        self._init(lookups, round_trips, writes)


class FingerprintLibrary(Protocol):
    """What ExactFilter and FingerprintLibraryFilter need from a library.

    A library shared by several writers (Redis) must make `present` followed by `apply` inside
    one `transaction()` atomic; SQLite does so with its write lock, and one process writes a
    SQLite library at a time.
    """

    io: LibraryIO

    @property
    def readonly(self) -> bool: ...

    @property
    def path(self) -> str | None: ...

    def present(self, fps: Sequence[bytes], *, batched: bool = True) -> set[bytes]:
        """Which of fps are in the library. batched=False looks them up one at a time, in
        order (the paper's method, for the experiment)."""
        ...

    def records(self, fps: Iterable[bytes]) -> dict[bytes, Record]: ...

    def apply(self, changes: Changes) -> None: ...

    def transaction(self) -> contextlib.AbstractContextManager[None]: ...

    def count(self) -> int:
        """Number of records."""
        ...

    def fingerprints(self, chunk: int = 65536) -> Iterator[list[bytes]]:
        """Every fingerprint, in chunks (for rebuilding counters)."""
        ...

    def older_than(self, timestamp: float, *, by: str = "first_seen") -> list[bytes]: ...

    def overflow(self, counters: Iterable[int]) -> dict[int, int]: ...

    def replace_overflow(self, counts: dict[int, int], meta: dict[str, str]) -> None: ...

    def get_meta(self, name: str) -> str | None: ...

    def close(self) -> None: ...


class SharedLibrary(Protocol):
    """A library several processes write at once, which decides each URL itself: claim()
    inserts each fingerprint if absent, atomically among all its writers, so local counters
    could prove nothing. It holds each answer "new" claimed until acknowledge() (unless
    auto_acknowledge), so a process killed before its caller has the answer loses no URL."""

    shared: bool
    fingerprint: str
    """The fingerprint hash its records use ("md5" or "xxh3_128")."""
    params: dict[str, Any]
    """What it was made with: "capacity" among them."""
    io: LibraryIO
    auto_acknowledge: bool

    @property
    def path(self) -> str | None: ...

    def claim(self, fps: Sequence[bytes], now: float | None = None) -> list[bool]:
        """Insert each fingerprint if absent, in order: True where it was new."""
        ...

    def acknowledge(self) -> int:
        """Release the claims of every answer given so far."""
        ...

    def present(self, fps: Sequence[bytes], *, batched: bool = True) -> set[bytes]: ...

    def forget(self, fps: Sequence[bytes]) -> list[bool]:
        """Remove each fingerprint whatever its references: True where it was present."""
        ...

    def memory_usage(self, sample: int | None = None) -> int:
        """Bytes the library's records take in their store (estimated from `sample` parts)."""
        ...

    def forget_older_than(self, timestamp: float) -> int:
        """Forget every fingerprint first seen before timestamp; how many."""
        ...

    def count(self) -> int: ...

    def close(self) -> None: ...


def time_index(by: str) -> int:
    """The position in Record of the time older_than(by=...) compares; ValueError for others."""
    if by not in ("first_seen", "last_seen"):
        raise ValueError(f"by must be 'first_seen' or 'last_seen', not {by!r}")
    return Record._fields.index(by)
