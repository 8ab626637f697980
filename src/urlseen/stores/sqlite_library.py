"""The fingerprint library in a SQLite file: the exact filter's embedded default.

Why SQLite: one file, crash-safe transactions, a B-tree keyed by the fingerprint, and it is in
every Python. Settings, and why:
- WAL journal, synchronous=NORMAL: a commit survives a killed process; an OS crash or power loss
  may lose the last commits (those URLs are new again: a re-crawl, never a lost page).
  durable=True uses synchronous=FULL (every commit on disk before add_many returns).
- `fingerprints` is a WITHOUT ROWID table keyed by the 16-byte fingerprint: one B-tree, no rowid
  index beside it; look-ups of a batch are sorted (IRLbot's DRUM lesson: touch the B-tree in
  key order, never one random page per URL).
- New records and reference changes are staged first (stores/_staging.py): one row per batch,
  mirrored in memory, merged into the B-tree in one sorted pass when `stage_limit`
  fingerprints are staged (DRUM's lesson again, across many batches): a random insert into a
  large B-tree costs a page write, a staged one 16 bytes (benchmarks/EXACT.md).
- A batch's look-ups, reference updates and deletes are one statement each, the fingerprints
  packed in one blob (`_ROWS`).
- 16 KiB pages and a WAL auto-checkpoint every 10,000 pages: fewer, larger writes for the
  random inserts that dominate (benchmarks/EXACT.md); the price is 16 KiB read per random
  look-up and a WAL that can grow to about 160 MiB before a checkpoint.
- The page cache is bounded (`cache_kib`, default 4 MiB): the library may be much larger than
  memory.
- application_id and user_version mark the file; a foreign or newer file is refused, a damaged
  one raises FormatError. Version 1 (format "urlseen-library", no stage) is read as it is and
  migrated by the first writer that opens it; urlseen releases before the stage refuse
  version 2 ("written by a newer urlseen"). One writer at a time (an flock beside SQLite's own
  locks; readers take none).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from urlseen.errors import FormatError
from urlseen.stores import _sqlite
from urlseen.stores._staging import STAGE_TABLE, Stage, pack_deltas
from urlseen.stores.library_protocol import (
    Changes,
    LibraryIO,
    Record,
    from_millis,
    time_index,
    to_millis,
)

APPLICATION_ID = 0x75726C73  # "urls"
SCHEMA_VERSION = 2
FORMAT = "urlseen-library-2"
FORMATS = ("urlseen-library", FORMAT)  # version 1 had no stage
DEFAULT_CACHE_KIB = 4096
# Staged fingerprints before a merge: this many, or as many as the B-tree holds up to twice
# this many (a merge rewrites most of the B-tree's pages, so it waits longer as the B-tree
# grows; the stage's memory, ~24-48 bytes a fingerprint, stays bounded).
DEFAULT_STAGE_LIMIT = 2_000_000
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

# The records a library file holds, counted from its rows (not its `records` meta row): the
# B-tree's rows and the fingerprints of the staged inserts. For checks from outside.
STORED_RECORDS = (
    "SELECT (SELECT COUNT(*) FROM fingerprints) + "
    "(SELECT COALESCE(SUM(length(fps)), 0) / 16 FROM staged WHERE deltas IS NULL)"
)

_SCHEMA = (
    """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE fingerprints (
    fp BLOB PRIMARY KEY,
    refs INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE overflow (counter INTEGER PRIMARY KEY, count INTEGER NOT NULL);
"""
    + STAGE_TABLE
)


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
        stage_limit: int = DEFAULT_STAGE_LIMIT,
    ) -> None:
        """Open the library at path, or create it (`meta`: more first meta rows). A library
        whose writer closed it is read whole and checked against its seal, unless a reader
        says check_seal=False (stores/_sqlite.py). stage_limit: staged fingerprints (in
        memory) that trigger a merge into the B-tree (up to twice as many once the B-tree
        holds more: DEFAULT_STAGE_LIMIT)."""
        self.io = LibraryIO()
        self._depth = 0
        self._stage_limit = stage_limit
        self._staged: Stage | None = None  # read from the file at first use
        self._has_stage = True  # False for a version-1 file opened read-only
        self._main_empty: bool | None = None  # the B-tree holds no record (known, or None)
        self._read_version = -1  # a reader's PRAGMA data_version when it read the stage
        first_meta = {
            "format": FORMAT,
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
        if not self._has_stage and not readonly:
            self._migrate()

    def _check_tables(self) -> None:
        try:
            fmt, records = self.get_meta("format"), self.get_meta("records")
        except sqlite3.OperationalError as exc:  # e.g. no such table
            raise FormatError(
                f"{self.path}: not a readable urlseen library: it has urlseen's mark but not "
                f"its tables ({exc})"
            ) from exc
        if fmt not in FORMATS or records is None:
            raise FormatError(f"{self.path}: a urlseen library without its metadata")
        table = "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'staged'"
        self._has_stage = self._db.execute(table).fetchone() is not None
        if fmt == FORMAT and not self._has_stage:
            raise FormatError(f"{self.path}: a urlseen library without its staging table")

    def _migrate(self) -> None:
        """A version-1 library becomes version 2: an empty stage, the new format name."""
        with self.transaction(), self._errors():
            self._db.execute(STAGE_TABLE)
            self._db.execute("UPDATE meta SET value = ? WHERE name = 'format'", (FORMAT,))
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._has_stage = True

    # -- the stage ----------------------------------------------------------------------------

    @property
    def _stage(self) -> Stage:
        """The staged rows in memory (read from the file at first use, and again after a
        rolled-back transaction)."""
        if self.readonly:  # a writer beside it may have staged or merged since: read again
            (version,) = self._db.execute("PRAGMA data_version").fetchone()
            if version != self._read_version:
                self._staged, self._main_empty, self._read_version = None, None, version
        if self._staged is None:
            self._staged = self._read_stage()
        return self._staged

    def _read_stage(self) -> Stage:
        stage = Stage()
        if self._has_stage:
            with self._errors():
                rows = self._db.execute("SELECT now, fps, deltas FROM staged ORDER BY batch")
                for now, fps, deltas in rows:
                    try:
                        stage.load_row(now, fps, deltas)
                    except (TypeError, ValueError) as exc:
                        raise FormatError(f"{self.path}: damaged staged row ({exc})") from exc
        return stage

    def _in_main(self, fps: Sequence[bytes]) -> set[bytes]:
        """Which of fps the B-tree holds: one sorted statement (none if it is empty)."""
        if not fps:
            return set()
        if self._main_empty is None:
            self._main_empty = (
                self._db.execute("SELECT 1 FROM fingerprints LIMIT 1").fetchone() is None
            )
        if self._main_empty:
            return set()
        sql = _ROWS + "SELECT fp FROM fingerprints WHERE fp IN (SELECT fp FROM batch)"
        return {row[0] for row in self._db.execute(sql, _packed(sorted(set(fps))))}

    def merge(self) -> None:
        """Move every staged change into the B-tree, in key order, in one transaction.

        A staged insert the B-tree holds already (a caller's known_absent was wrong) keeps the
        B-tree's record and leaves the record count right: nothing is stuck on it."""
        stage = self._stage
        if not stage.rows:
            return
        db = self._db
        with self.transaction(), self._errors():
            if stage.new:
                fps, times = stage.new.sorted()
                before = db.total_changes
                db.execute(
                    "INSERT OR IGNORE INTO fingerprints SELECT substr(:fps, j.key * 16 + 1, 16), "
                    "1, j.value, j.value FROM json_each(:times) AS j",
                    {"fps": fps, "times": json.dumps(times)},
                )
                if (repeated := len(times) - (db.total_changes - before)) > 0:
                    db.execute(
                        "UPDATE meta SET value = CAST(value AS INTEGER) - ? WHERE name = 'records'",
                        (repeated,),
                    )
            if stage.deltas:
                order = sorted(stage.deltas)
                self._update_refs(order, [stage.deltas[fp] for fp in order])
            db.execute("DELETE FROM staged")
            self._staged = Stage()
            self._main_empty = False

    def _merge_threshold(self) -> int:
        """Staged fingerprints that call for a merge (see DEFAULT_STAGE_LIMIT)."""
        in_btree = self.count() - len(self._stage.new)
        return max(self._stage_limit, min(in_btree, 2 * self._stage_limit))

    def _update_refs(self, order: list[bytes], pairs: list[list[int]]) -> None:
        """Add [delta, last seen ms] to the records of the sorted fingerprints `order`."""
        self._db.execute(
            "UPDATE fingerprints SET refs = refs + u.delta, "
            "last_seen = max(last_seen, u.seen) "
            "FROM (SELECT substr(:fps, j.key * 16 + 1, 16) AS fp, "
            "json_extract(j.value, '$[0]') AS delta, json_extract(j.value, '$[1]') AS seen "
            "FROM json_each(:pairs) AS j) AS u WHERE fingerprints.fp = u.fp",
            {**_packed(order), "pairs": json.dumps(pairs)},
        )

    # -- reads --------------------------------------------------------------------------------

    def present(self, fps: Sequence[bytes], *, batched: bool = True) -> set[bytes]:
        if not fps:
            return set()
        self.io.lookups += len(fps)
        inside, rest = self._stage.new.partition(fps)
        found = set(inside)
        with self._errors():
            if not batched:
                one = "SELECT 1 FROM fingerprints WHERE fp = ?"
                self.io.round_trips += len(fps) - len(rest)
                for fp in rest:
                    self.io.round_trips += 1
                    if self._db.execute(one, (fp,)).fetchone() is not None:
                        found.add(fp)
                return found
            found |= self._in_main(rest)
            self.io.round_trips += 1
        return found

    def records(self, fps: Iterable[bytes]) -> dict[bytes, Record]:
        out = {}
        sql = "SELECT refs, first_seen, last_seen FROM fingerprints WHERE fp = ?"
        stage = self._stage
        with self._errors():
            for fp in sorted(set(fps)):
                self.io.lookups += 1
                row = None if fp in stage.new else self._db.execute(sql, (fp,)).fetchone()
                rec = stage.record(fp, row)
                if rec is not None:
                    out[fp] = Record(rec[0], from_millis(rec[1]), from_millis(rec[2]))
        return out

    def count(self) -> int:
        return int(self.get_meta("records") or 0)

    def fingerprints(self, chunk: int = 65536) -> Iterator[list[bytes]]:
        staged = self._stage.new.keys()  # first: a merge in between repeats, never loses one
        with self._errors():
            cursor = self._db.execute("SELECT fp FROM fingerprints")
            rows = (row[0] for row in iter(cursor.fetchone, None))
            every = itertools.chain(rows, staged)
            while batch := list(itertools.islice(every, chunk)):
                yield batch

    def older_than(self, timestamp: float, *, by: str = "first_seen") -> list[bytes]:
        column = time_index(by)  # a checked column name, and its place in a record
        limit = to_millis(timestamp)
        stage = self._stage
        sql = f"SELECT fp, refs, first_seen, last_seen FROM fingerprints WHERE {by} < ?"
        with self._errors():
            rows = self._db.execute(sql, (limit,)).fetchall()
        records = [(fp, stage.record(fp, (refs, first, last))) for fp, refs, first, last in rows]
        records += [(fp, stage.record(fp, None)) for fp, _ in stage.new.items()]
        return [fp for fp, rec in records if rec is not None and rec[column] < limit]

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
            self._depth = 0
            with self._errors():
                self._db.execute("COMMIT")
        except BaseException:
            self._depth = 0
            self._staged = None  # the stage in memory may be ahead: read it again
            self._main_empty = None
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise

    def apply(self, changes: Changes) -> None:
        if not changes:
            return
        now = to_millis(changes.now)
        db = self._db
        with self.transaction(), self._errors():
            grown = 0
            stage = self._stage
            if changes.inserts:
                inserts = changes.inserts
                blob = _packed(inserts)["fps"]  # ValueError for a fingerprint of another size
                if not changes.known_absent and self._in_main(inserts):
                    raise ValueError("inconsistent changes: inserts already present")
                stage.insert(inserts, now)  # ValueError for a repeat, or one staged already
                db.execute("INSERT INTO staged (now, fps) VALUES (?, ?)", (now, blob))
                grown += len(inserts)
            if changes.refs:  # staged for present records only (absent ones: nothing to do)
                refs, seen = changes.refs, changes.seen
                absent = stage.new.partition(list(refs))[1]
                gone = set(absent) - self._in_main(absent) if absent else set()
                fps = [fp for fp in refs if fp not in gone]
                if fps:
                    times = [round(seen.get(fp, changes.now) * 1000) for fp in fps]
                    deltas = pack_deltas([refs[fp] for fp in fps], times)
                    fps_blob = b"".join(fps)
                    db.execute(
                        "INSERT INTO staged (now, fps, deltas) VALUES (?, ?, ?)",
                        (now, fps_blob, deltas),
                    )
                    stage.add_deltas(fps_blob, deltas)
            if changes.deletes:  # in the B-tree alone: a record is never staged and deleted
                self.merge()
                before = db.total_changes  # rowcount is -1 for a statement that starts WITH
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
            if self._stage.rows >= self._merge_threshold():
                self.merge()
        self.io.writes += len(changes.inserts) + len(changes.refs) + len(changes.deletes)
        self.io.round_trips += 1

    def replace_overflow(self, counts: dict[int, int], meta: dict[str, str]) -> None:
        with self.transaction(), self._errors():
            self._db.execute("DELETE FROM overflow")
            self._db.executemany("INSERT INTO overflow VALUES (?, ?)", counts.items())
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())

    def verify(self) -> bool:
        """Run SQLite's integrity check over the whole file, read every staged row and count
        the records against the library's count and, if it was closed cleanly,
        compare its bytes with its seal; FormatError if either fails. True if the seal was
        compared (every byte checked), False if there is none (its writer did not close it,
        or a writer has it open)."""
        with self._errors():
            result = self._db.execute("PRAGMA integrity_check").fetchall()
        if result != [("ok",)]:
            raise FormatError(f"{self.path}: damaged library ({result[0][0]})")
        self._staged = self._read_stage()  # every staged row read and checked again
        with self._errors():
            (stored,) = self._db.execute(STORED_RECORDS).fetchone()
        if stored != self.count():
            raise FormatError(
                f"{self.path}: damaged library (it holds {stored} records, its count says "
                f"{self.count()})"
            )
        if self.readonly and not self.sealed:
            self.sealed = self._check_seal(Path(self.path))
        return self.sealed and self.readonly

    def files(self) -> list[str]:
        """The database file and its WAL (for the experiment's page-cache eviction)."""
        return [p for p in (self.path, self.path + "-wal") if os.path.exists(p)]
