"""The fingerprint library in a SQLite file: the exact filter's embedded default.

Why SQLite: one file, crash-safe transactions, a B-tree keyed by the fingerprint, and it is in
every Python. Settings, and why:
- WAL journal, synchronous=NORMAL: a commit survives a killed process; an OS crash or power loss
  may lose the last commits (those URLs are new again: a re-crawl, never a lost page).
  durable=True uses synchronous=FULL (every commit on disk before add_many returns).
- `fingerprints` is a WITHOUT ROWID table keyed by the 16-byte fingerprint: one B-tree, no rowid
  index beside it; inserts and look-ups of a batch are sorted (IRLbot's DRUM lesson: touch
  the B-tree in key order, never one random page per URL).
- A batch's look-ups, inserts, reference updates and deletes are one statement each, the
  fingerprints packed in one blob (`_ROWS`).
- 16 KiB pages and a WAL auto-checkpoint every 10,000 pages: fewer, larger writes for the
  random inserts that dominate (benchmarks/EXACT.md); the price is 16 KiB read per random
  look-up and a WAL that can grow to about 160 MiB before a checkpoint.
- The page cache is bounded (`cache_kib`, default 4 MiB): the library may be much larger than
  memory.
- application_id and user_version mark the file; a foreign or newer file is refused, a damaged
  one raises FormatError. One writer at a time (an flock beside SQLite's own locks;
  readers take none).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from urlseen.errors import FormatError
from urlseen.stores import _sqlite
from urlseen.stores.library_protocol import (
    Changes,
    LibraryIO,
    Record,
    from_millis,
    time_index,
    to_millis,
)

APPLICATION_ID = 0x75726C73  # "urls"
SCHEMA_VERSION = 1
DEFAULT_CACHE_KIB = 4096
PAGE_SIZE = 16384
WAL_CHECKPOINT_PAGES = 10000
FP_BYTES = 16
# A batch of fingerprints travels as one blob, cut back into rows inside SQLite: no Python work
# per row (executemany builds and binds a tuple per row), and one prepared statement for any
# batch size.
_ROWS = (
    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count), "
    "batch(fp) AS (SELECT substr(:fps, i * 16 + 1, 16) FROM n) "
)

_SCHEMA = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE fingerprints (
    fp BLOB PRIMARY KEY,
    refs INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE overflow (counter INTEGER PRIMARY KEY, count INTEGER NOT NULL);
"""


def _packed(fps: Sequence[bytes]) -> dict[str, object]:
    """The :fps and :count parameters of a batch statement (_ROWS)."""
    blob = b"".join(fps)
    if len(blob) != FP_BYTES * len(fps):
        raise ValueError(f"fingerprints must be {FP_BYTES} bytes each")
    return {"fps": blob, "count": len(fps)}


class SQLiteLibrary(_sqlite.SQLiteStore):
    """The FingerprintLibrary protocol on a SQLite file (see the module docstring)."""

    _noun = "library"
    APPLICATION_ID = APPLICATION_ID
    SCHEMA_VERSION = SCHEMA_VERSION
    SCHEMA = _SCHEMA
    _unreadable = _damaged = "not a readable urlseen library"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        readonly: bool = False,
        durable: bool = False,
        cache_kib: int = DEFAULT_CACHE_KIB,
        fingerprint: str = "md5",
        meta: Mapping[str, str] | None = None,
        check_seal: bool = True,
    ) -> None:
        """Open the library at path, or create it (`meta`: more first meta rows). A library
        whose writer closed it is read whole and checked against its seal, unless a reader
        says check_seal=False (stores/_sqlite.py)."""
        self.io = LibraryIO()
        self._depth = 0
        first_meta = {
            "format": "urlseen-library",
            "fingerprint": fingerprint,
            "library_id": uuid.uuid4().hex,
            "records": "0",
            "counters": "",
            **(meta or {}),
        }
        pragmas = (
            f"cache_size=-{int(cache_kib)}",
            f"wal_autocheckpoint={WAL_CHECKPOINT_PAGES}",
            "mmap_size=0",
        )
        super().__init__(
            path, create=create, readonly=readonly, durable=durable, new_meta=first_meta,
            pragmas=pragmas, page_size=PAGE_SIZE, check_seal=check_seal,
        )  # fmt: skip

    def _check_tables(self) -> None:
        try:
            fmt, records = self.get_meta("format"), self.get_meta("records")
        except sqlite3.OperationalError as exc:  # e.g. no such table
            raise FormatError(
                f"{self.path}: not a readable urlseen library: it has urlseen's mark but not "
                f"its tables ({exc})"
            ) from exc
        if fmt != "urlseen-library" or records is None:
            raise FormatError(f"{self.path}: a urlseen library without its metadata")

    # -- reads --------------------------------------------------------------------------------

    def present(self, fps: Sequence[bytes], *, batched: bool = True) -> set[bytes]:
        found: set[bytes] = set()
        if not fps:
            return found
        self.io.lookups += len(fps)
        with self._errors():
            if not batched:
                one = "SELECT 1 FROM fingerprints WHERE fp = ?"
                for fp in fps:
                    self.io.round_trips += 1
                    if self._db.execute(one, (fp,)).fetchone() is not None:
                        found.add(fp)
                return found
            ordered = sorted(set(fps))
            sql = _ROWS + "SELECT fp FROM fingerprints WHERE fp IN (SELECT fp FROM batch)"
            found.update(row[0] for row in self._db.execute(sql, _packed(ordered)))
            self.io.round_trips += 1
        return found

    def records(self, fps: Iterable[bytes]) -> dict[bytes, Record]:
        out = {}
        sql = "SELECT refs, first_seen, last_seen FROM fingerprints WHERE fp = ?"
        with self._errors():
            for fp in sorted(set(fps)):
                row = self._db.execute(sql, (fp,)).fetchone()
                self.io.lookups += 1
                if row is not None:
                    out[fp] = Record(row[0], from_millis(row[1]), from_millis(row[2]))
        return out

    def count(self) -> int:
        return int(self.get_meta("records") or 0)

    def fingerprints(self, chunk: int = 65536) -> Iterator[list[bytes]]:
        with self._errors():
            cursor = self._db.execute("SELECT fp FROM fingerprints")
            while rows := cursor.fetchmany(chunk):
                yield [row[0] for row in rows]

    def older_than(self, timestamp: float, *, by: str = "first_seen") -> list[bytes]:
        time_index(by)  # a checked column name
        sql = f"SELECT fp FROM fingerprints WHERE {by} < ?"
        with self._errors():
            return [row[0] for row in self._db.execute(sql, (to_millis(timestamp),))]

    def overflow(self, counters: Iterable[int]) -> dict[int, int]:
        sql = "SELECT count FROM overflow WHERE counter = ?"
        out = {}
        with self._errors():
            for c in sorted(set(counters)):
                row = self._db.execute(sql, (c,)).fetchone()
                if row is not None:
                    out[c] = row[0]
        return out

    def get_meta(self, name: str) -> str | None:
        with self._errors():
            row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    # -- writes -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction (BEGIN IMMEDIATE: the write lock from the start); nests."""
        self._writing()  # ReadOnlyError for a reader
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with self._errors():
            self._db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self._depth = 0
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        self._depth = 0
        with self._errors():
            self._db.execute("COMMIT")

    def apply(self, changes: Changes) -> None:
        if not changes:
            return
        now = to_millis(changes.now)
        db = self._db
        with self.transaction(), self._errors():
            grown = 0
            if changes.inserts:
                before = db.total_changes  # rowcount is -1 for a statement that starts WITH
                db.execute(
                    _ROWS + "INSERT INTO fingerprints SELECT fp, 1, :now, :now FROM batch",
                    {**_packed(sorted(changes.inserts)), "now": now},
                )
                grown += db.total_changes - before
            if changes.refs:
                order = sorted(changes.refs)
                seen = changes.seen
                pairs = [
                    [changes.refs[fp], to_millis(seen[fp]) if fp in seen else now] for fp in order
                ]
                db.execute(
                    "UPDATE fingerprints SET refs = refs + u.delta, "
                    "last_seen = max(last_seen, u.seen) "
                    "FROM (SELECT substr(:fps, j.key * 16 + 1, 16) AS fp, "
                    "json_extract(j.value, '$[0]') AS delta, json_extract(j.value, '$[1]') AS seen "
                    "FROM json_each(:pairs) AS j) AS u WHERE fingerprints.fp = u.fp",
                    {**_packed(order), "pairs": json.dumps(pairs)},
                )
            if changes.deletes:
                before = db.total_changes
                db.execute(
                    _ROWS + "DELETE FROM fingerprints WHERE fp IN (SELECT fp FROM batch)",
                    _packed(sorted(set(changes.deletes))),
                )
                grown -= db.total_changes - before
            drop = [(c,) for c, v in changes.overflow.items() if v is None]
            keep = [(c, v) for c, v in changes.overflow.items() if v is not None]
            if drop:
                db.executemany("DELETE FROM overflow WHERE counter = ?", drop)
            if keep:
                db.executemany("INSERT OR REPLACE INTO overflow VALUES (?, ?)", keep)
            if grown:
                db.execute(
                    "UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE name = 'records'",
                    (grown,),
                )
            if changes.meta:
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", changes.meta.items())
        self.io.writes += len(changes.inserts) + len(changes.refs) + len(changes.deletes)
        self.io.round_trips += 1

    def replace_overflow(self, counts: dict[int, int], meta: dict[str, str]) -> None:
        with self.transaction(), self._errors():
            self._db.execute("DELETE FROM overflow")
            self._db.executemany("INSERT INTO overflow VALUES (?, ?)", counts.items())
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())

    def verify(self) -> bool:
        """Run SQLite's integrity check over the whole file and, if it was closed cleanly,
        compare its bytes with its seal; FormatError if either fails. True if the seal was
        compared (every byte checked), False if there is none (its writer did not close it,
        or a writer has it open)."""
        with self._errors():
            result = self._db.execute("PRAGMA integrity_check").fetchall()
        if result != [("ok",)]:
            raise FormatError(f"{self.path}: damaged library ({result[0][0]})")
        if self.readonly and not self.sealed:
            self.sealed = self._check_seal(Path(self.path))
        return self.sealed and self.readonly

    def files(self) -> list[str]:
        """The database file and its WAL (for the experiment's page-cache eviction)."""
        return [p for p in (self.path, self.path + "-wal") if os.path.exists(p)]
