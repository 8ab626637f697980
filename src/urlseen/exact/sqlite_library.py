"""The fingerprint library in a SQLite file: the exact filter's embedded default.

Why SQLite: one file, crash-safe transactions, a B-tree keyed by the fingerprint, and it is in
every Python. Settings, and why:
- WAL journal, synchronous=NORMAL: a commit survives a killed process; an OS crash or power loss
  may lose the last commits (those URLs are new again: a re-crawl, never a lost page).
  durable=True uses synchronous=FULL (every commit on disk before add_many returns).
- Records live in sorted runs (exact/runs.py): WITHOUT ROWID tables keyed by the 16-byte
  fingerprint, written once in key order and merged by size tier, so each record is rewritten
  O(log N) times; look-ups of a batch are sorted (IRLbot's DRUM lesson: touch a B-tree in key
  order, never one random page per URL). The `fingerprints` view is their union.
- New records and reference changes are staged first (exact/staging.py): one row per batch,
  mirrored in memory, written as a new run when `stage_limit` fingerprints are staged (DRUM's
  lesson again, across many batches): a random insert into a large B-tree costs a page write,
  a staged one 16 bytes (measured by benchmarks/exact/library_pace.py).
- A batch's look-ups, reference updates and deletes are one statement each, the fingerprints
  packed in one blob (`_runs.ROWS`).
- 16 KiB pages and a WAL auto-checkpoint every 10,000 pages: fewer, larger writes for the
  random inserts that dominate (measured by benchmarks/exact/library_pace.py); the price is 16 KiB
  read per random look-up and a WAL that can grow to about 160 MiB before a checkpoint.
- The page cache is bounded (`cache_kib`, default 4 MiB): the library may be much larger than
  memory.
- application_id and user_version mark the file; a foreign or newer file is refused, a damaged
  one raises FormatError. Versions 1 (format "urlseen-library", no stage) and 2
  ("urlseen-library-2": one B-tree behind the stage) are read as they are and migrated by the
  first writer that opens them (the B-tree becomes the first run). One writer at a time (an
  flock beside SQLite's own locks; readers take none).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from urlseen import _core
from urlseen.errors import FormatError
from urlseen.exact import runs as _runs
from urlseen.exact.library_protocol import (
    Changes,
    LibraryIO,
    Record,
    time_index,
)
from urlseen.exact.runs import packed as _packed
from urlseen.exact.staging import STAGE_TABLE, Stage
from urlseen.state import sqlite
from urlseen.state.sqlite import from_millis, to_millis

APPLICATION_ID = 0x75726C73  # "urls"
SCHEMA_VERSION = 3
FORMAT = "urlseen-library-3"
# version 1 had no stage, version 2 one B-tree behind it: both migrate to runs
FORMATS = ("urlseen-library", "urlseen-library-2", FORMAT)
DEFAULT_CACHE_KIB = 4096
# Staged fingerprints that make a new run (the stage's memory, ~24-48 bytes a fingerprint,
# stays bounded; runs of this size are the smallest tier, exact/runs.py).
DEFAULT_STAGE_LIMIT = 2_000_000
PAGE_SIZE = 16384
WAL_CHECKPOINT_PAGES = 10000
FP_BYTES = 16

# The records a library file holds, counted from its rows (not its `records` meta row): the
# runs' rows (the `fingerprints` view, or a version-1 or -2 file's B-tree) and the fingerprints
# of the staged inserts. For checks from outside.
STORED_RECORDS = (
    "SELECT (SELECT COUNT(*) FROM fingerprints) + "
    "(SELECT COALESCE(SUM(length(fps)), 0) / 16 FROM staged WHERE deltas IS NULL)"
)

_SCHEMA = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE overflow (counter INTEGER PRIMARY KEY, count INTEGER NOT NULL);
""" + ";\n".join((_runs.CATALOG, _runs.EMPTY_VIEW, STAGE_TABLE))


class SQLiteLibrary(sqlite.SQLiteStore):
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
        says check_seal=False (state/sqlite.py). stage_limit: staged fingerprints (in
        memory) that make a new run (DEFAULT_STAGE_LIMIT)."""
        self.io = LibraryIO()
        self._depth = 0
        self._stage_limit = stage_limit
        self._staged: Stage | None = None  # read from the file at first use
        self._runs: _runs.Runs | _runs.SingleTree | None = None  # likewise
        self._known: list[_runs.Run] = []  # runs a reader read before a writer's commit
        self._version = SCHEMA_VERSION  # of the file as opened (1 or 2: migrated by a writer)
        self._read_version = -1  # a reader's PRAGMA data_version when it read the stage
        first_meta = {
            "format": FORMAT,
            "fingerprint": fingerprint,
            "library_id": os.urandom(16).hex(),
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
            path,
            create=create,
            readonly=readonly,
            durable=durable,
            new_meta=first_meta,
            pragmas=pragmas,
            page_size=PAGE_SIZE,
            check_seal=check_seal,
        )
        if self._version < SCHEMA_VERSION and not readonly:
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
        self._version = FORMATS.index(fmt) + 1
        kinds = dict(self._db.execute("SELECT name, type FROM sqlite_schema").fetchall())
        if self._version > 1 and kinds.get("staged") != "table":
            raise FormatError(f"{self.path}: a urlseen library without its staging table")
        if self._version < SCHEMA_VERSION:
            if kinds.get(_runs.VIEW) != "table":
                raise FormatError(f"{self.path}: a urlseen library without its records")
            return
        if kinds.get("runs") != "table" or kinds.get(_runs.VIEW) != "view":
            raise FormatError(f"{self.path}: a urlseen library without its catalog of runs")
        missing = [name for _, name in self._catalog.named() if kinds.get(name) != "table"]
        if missing:
            raise FormatError(f"{self.path}: a urlseen library without its {missing[0]}")

    def _migrate(self) -> None:
        """A version-1 or -2 library becomes version 3: its B-tree the first run (read once in
        key order), a stage if it had none, the new format name."""
        with self.transaction(), self._errors():
            db = self._db
            if self._version == 1:
                db.execute(STAGE_TABLE)
            db.execute(_runs.CATALOG)
            _runs.SingleTree(db).into_run()
            db.execute("UPDATE meta SET value = ? WHERE name = 'format'", (FORMAT,))
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._version = SCHEMA_VERSION
        self._staged = self._runs = None

    # -- the stage and the runs ---------------------------------------------------------------

    def _current(self) -> None:
        """A reader forgets what it read of the stage and the runs once a writer beside it
        has committed since (it may have staged, written runs or merged them; the runs it
        knows keep their fences and Bloom filters, `_catalog`)."""
        if self.readonly:
            (version,) = self._db.execute("PRAGMA data_version").fetchone()
            if version != self._read_version:
                self._staged, self._read_version = None, version
                self._known = self._runs.runs if self._runs is not None else []
                self._runs = None

    @property
    def _stage(self) -> Stage:
        """The staged rows in memory (read from the file at first use, and again after a
        rolled-back transaction)."""
        self._current()
        if self._staged is None:
            self._staged = self._read_stage()
        return self._staged

    @property
    def _catalog(self) -> _runs.Runs | _runs.SingleTree:
        """The runs (read from the file at first use, and again after a rolled-back
        transaction); a version-1 or -2 file's B-tree for a reader."""
        self._current()
        if self._runs is None:
            with self._errors():
                if self._version < SCHEMA_VERSION:
                    self._runs = _runs.SingleTree(self._db)
                else:
                    self._runs = _runs.Runs(self._db, self._known)
        return self._runs

    @property
    def _writable_runs(self) -> _runs.Runs:
        runs = self._catalog
        assert isinstance(runs, _runs.Runs), "a writer migrates an older file first"
        return runs

    def _read_stage(self) -> Stage:
        stage = Stage()
        if self._version > 1:
            with self._errors():
                rows = self._db.execute("SELECT now, fps, deltas FROM staged ORDER BY batch")
                for now, fps, deltas in rows:
                    try:
                        stage.load_row(now, fps, deltas)
                    except (TypeError, ValueError) as exc:
                        raise FormatError(f"{self.path}: damaged staged row ({exc})") from exc
        return stage

    def _in_main(self, fps: Sequence[bytes]) -> set[bytes]:
        """Which of fps the runs hold (sorted statements; none if there is no run)."""
        return self._catalog.present(fps) if fps else set()

    def merge(self) -> None:
        """Write every staged insert as a new run and every staged delta into the runs, in
        one transaction, then merge runs by size tier (exact/runs.py).

        A staged insert that a run holds already (a caller's known_absent was wrong) is counted
        until the runs holding it are merged: the older record stays, the count comes right."""
        stage = self._stage
        if not stage.rows:
            return
        db, runs = self._db, self._writable_runs
        with self.transaction(), self._errors():
            if stage.new:
                runs.write(stage.new.sorted_records())
            if stage.deltas:
                order = sorted(stage.deltas)
                runs.update_refs(order, [stage.deltas[fp] for fp in order])
            db.execute("DELETE FROM staged")
            self._staged = Stage()
            self._repeats_gone(runs.compact(self._stage_limit))

    def compact(self) -> None:
        """Merge the stage and every run into one run (a library at rest: one look-up per key;
        the tiers make this unnecessary while it grows)."""
        with self.transaction(), self._errors():
            self.merge()
            self._repeats_gone(self._writable_runs.merge_all())

    def _repeats_gone(self, repeats: int) -> None:
        if repeats:
            self._db.execute(
                "UPDATE meta SET value = CAST(value AS INTEGER) - ? WHERE name = 'records'",
                (repeats,),
            )

    # -- reads --------------------------------------------------------------------------------

    def present(self, fps: Sequence[bytes], *, batched: bool = True) -> set[bytes]:
        if not fps:
            return set()
        self.io.lookups += len(fps)
        inside, rest = self._stage.new.partition(fps)
        found = set(inside)
        with self._errors():
            if not batched:  # the paper's baseline: a look-up (of each run) per key
                self.io.round_trips += len(fps) - len(rest)
                for fp in rest:
                    self.io.round_trips += 1
                    found |= self._in_main([fp])
                return found
            found |= self._in_main(rest)
            self.io.round_trips += 1
        return found

    def records(self, fps: Iterable[bytes]) -> dict[bytes, Record]:
        out = {}
        stage, runs = self._stage, self._catalog
        with self._errors():
            for fp in sorted(set(fps)):
                self.io.lookups += 1
                rec = stage.record(fp, None if fp in stage.new else runs.record(fp))
                if rec is not None:
                    out[fp] = Record(rec[0], from_millis(rec[1]), from_millis(rec[2]))
        return out

    def count(self) -> int:
        return int(self.get_meta("records") or 0)

    def fingerprints(self, chunk: int = 65536) -> Iterator[list[bytes]]:
        staged = self._stage.new.keys()  # first: a merge in between repeats, never loses one
        with self._errors():
            yield from _runs.scan(lambda: self._catalog, chunk)
            rest = iter(staged)
            while batch := list(itertools.islice(rest, chunk)):
                yield batch

    def older_than(self, timestamp: float, *, by: str = "first_seen") -> list[bytes]:
        column = time_index(by)  # a checked column name, and its place in a record
        limit = to_millis(timestamp)
        stage = self._stage
        with self._errors():
            rows = self._catalog.older_than(by, limit)
        records = [(fp, stage.record(fp, (refs, first, last))) for fp, refs, first, last in rows]
        records += [(fp, stage.record(fp, None)) for fp, _ in stage.new.items()]
        old = (fp for fp, rec in records if rec is not None and rec[column] < limit)
        return list(dict.fromkeys(old))  # a repeat in two runs (see merge) once

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
            self._staged = self._runs = None  # may be ahead of the file: read them again
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
                fps = [fp for fp in refs if fp not in gone] if gone else list(refs)
                if fps:
                    fps_blob, deltas = _core.pack_refs(fps, refs, seen, changes.now)
                    db.execute(
                        "INSERT INTO staged (now, fps, deltas) VALUES (?, ?, ?)",
                        (now, fps_blob, deltas),
                    )
                    stage.add_deltas(fps_blob, deltas)
            if changes.deletes:  # in the runs alone: a record is never staged and deleted
                self.merge()
                grown -= self._writable_runs.delete(changes.deletes)
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
            if self._stage.rows >= self._stage_limit:
                self.merge()
        self.io.writes += len(changes.inserts) + len(changes.refs) + len(changes.deletes)
        self.io.round_trips += 1

    def replace_overflow(self, counts: dict[int, int], meta: dict[str, str]) -> None:
        with self.transaction(), self._errors():
            self._db.execute("DELETE FROM overflow")
            self._db.executemany("INSERT INTO overflow VALUES (?, ?)", counts.items())
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())

    def verify(self) -> bool:
        """Run SQLite's integrity check over the whole file, read every staged row, count each
        run's records against its catalog row and all records against the library's count
        and, if it was closed cleanly, compare its bytes with its seal; FormatError if either
        fails. True if the seal was compared (every byte checked), False if there is none (its
        writer did not close it, or a writer has it open)."""
        snapshot = self.readonly and not self._db.in_transaction
        with self._errors():  # a reader's checks see one commit: a writer beside it goes on
            if snapshot:
                self._db.execute("BEGIN")
            try:
                stored, count = self._check_whole()
            finally:
                if snapshot:
                    self._db.execute("ROLLBACK")
        if stored != count:
            raise FormatError(
                f"{self.path}: damaged library (it holds {stored} records, its count says {count})"
            )
        if self.readonly and not self.sealed:
            self.sealed = self._check_seal(Path(self.path))
        return self.sealed and self.readonly

    def _check_whole(self) -> tuple[int, int]:
        """verify()'s reads: SQLite's integrity check, every staged row, each run against its
        catalog row; the records they hold, and the count the library records."""
        result = self._db.execute("PRAGMA integrity_check").fetchall()
        if result != [("ok",)]:
            raise FormatError(f"{self.path}: damaged library ({result[0][0]})")
        stage = self._staged = self._read_stage()  # every staged row read and checked again
        self._runs, self._known = None, []  # the catalog read again, checked against the runs
        runs = self._catalog
        try:
            runs.check()
        except ValueError as exc:
            raise FormatError(f"{self.path}: damaged library ({exc})") from exc
        if isinstance(runs, _runs.Runs):  # the runs' counts, just checked
            stored = sum(run.rows for run in runs.runs)
        else:  # an older library's one B-tree (version 1 has no stage)
            (stored,) = self._db.execute(f"SELECT COUNT(*) FROM {_runs.VIEW}").fetchone()
        return stored + len(stage.new), self.count()

    def files(self) -> list[str]:
        """The database file and its WAL (for the experiment's page-cache eviction)."""
        return [p for p in (self.path, self.path + "-wal") if os.path.exists(p)]
