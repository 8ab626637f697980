"""The library's records as sorted runs: packed records written once, merged by size tier.

Why: merging staged fingerprints into one large B-tree rewrites most of its pages each time,
so that work grows as N² / stage size; and any design that moves records one SQLite row at a
time pays a fixed cost per record (measured by benchmarks/exact/library_pace.py). Here a full stage
becomes a new run: its records packed in key order, 40 bytes each (csrc/runs.h), CHUNK records
to a row of its own table `run_<id>(chunk, data)`. When TIER_FACTOR runs of one size tier exist
they are merged into one run of the next tier, in C, a window of each run at a time, and the
old tables are dropped whole. Each record is rewritten about once per tier,
log_TIER_FACTOR(N / stage) times.

A look-up asks each run's Bloom filter (10 bits a record, in memory) and, for a run that may
hold the key, reads the one chunk its fence pointers (each chunk's first key) name. The
filters and fences are stored beside the run in the catalog (`runs`), written with it.

Everything happens in the caller's SQLite transaction, so crash safety is SQLite's: a killed
merge leaves the runs as they were. The `fingerprints` view lists every run's fingerprints,
for checks from outside (STORED_RECORDS, tests). A record is in one run, except after a
caller's wrong `known_absent`: the repeat is counted until the runs holding it are merged,
which keeps the oldest run's record (see `merge`).
"""

from __future__ import annotations

import bisect
import json
import math
import sqlite3
import struct
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

from urlseen import _core

FP_BYTES = 16
FIELDS = "fp, refs, first_seen, last_seen"
RECORD = struct.Struct("<16sqqq")  # fingerprint, refs, first seen ms, last seen ms
CHUNK = 400  # records a row: 16,000 bytes, one 16 KiB page (the library's page size)
WINDOW = 64  # chunks of each run a merge holds in memory at a time
BLOOM_BITS = 10  # a record
TIER_FACTOR = 4
VIEW = "fingerprints"
# A run's id is never used again (AUTOINCREMENT): a reader keeps the fences and Bloom filter
# of the runs it has read (they never change) and reads only new runs' after a write.
CATALOG = (
    "CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, rows INTEGER NOT NULL, "
    "fences BLOB NOT NULL, bloom BLOB NOT NULL)"
)
EMPTY_VIEW = f"CREATE VIEW {VIEW} (fp) AS SELECT NULL WHERE 0"
# A batch of fingerprints travels as one blob, cut back into rows inside SQLite: no Python work
# per row (executemany builds and binds a tuple per row), and one prepared statement for any
# batch size.
ROWS = (
    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count), "
    "batch(fp) AS (SELECT substr(:fps, i * 16 + 1, 16) FROM n) "
)


def packed(fps: Sequence[bytes]) -> dict[str, object]:
    """The :fps and :count parameters of a batch statement (ROWS)."""
    blob = b"".join(fps)
    if len(blob) != FP_BYTES * len(fps):
        raise ValueError(f"fingerprints must be {FP_BYTES} bytes each")
    return {"fps": blob, "count": len(fps)}


def table(run: int) -> str:
    return f"run_{int(run)}"


def view_of(tables: Sequence[str]) -> str:
    """The statement that makes the `fingerprints` view: each record's fingerprint, cut from
    the chunks of every run table."""
    if not tables:
        return EMPTY_VIEW
    arms = " UNION ALL ".join(
        f"SELECT substr(data, i * {RECORD.size} + 1, 16) FROM {t}, i "
        f"WHERE i * {RECORD.size} < length(data)"
        for t in tables
    )
    count = f"i(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM i WHERE i + 1 < {CHUNK})"
    return f"CREATE VIEW {VIEW} (fp) AS WITH RECURSIVE {count} {arms}"


def tier(rows: int, base: int) -> int:
    """A run's size tier: 0 around one stage (`base` records), one more for each TIER_FACTOR
    times that (rounded, so a merge of four slightly short runs still moves up a tier)."""
    return max(0, round(math.log(max(rows, 1) / max(base, 1), TIER_FACTOR)))


class Run:
    """One run in memory: its id, record count, fence pointers and Bloom filter."""

    def __init__(self, run: int, rows: int, fences: bytes, bloom: bytes) -> None:
        self.id, self.rows, self.bloom = run, rows, bloom
        self.fences = [fences[i : i + FP_BYTES] for i in range(0, len(fences), FP_BYTES)]

    @property
    def table(self) -> str:
        return table(self.id)

    def chunk_of(self, fp: bytes) -> int:
        """The chunk that would hold fp (the last whose first key is <= fp; 0 before all)."""
        return max(0, bisect.bisect_right(self.fences, fp) - 1)

    def candidates(self, fps: Sequence[bytes]) -> list[bytes]:
        """The fingerprints this run may hold (its Bloom filter's say)."""
        mask = _core.run_bloom_check(self.bloom, b"".join(fps))
        return [fp for fp, maybe in zip(fps, mask, strict=True) if maybe]


class RunWriter:
    """Builds a new run from records given in key order: its catalog row (for a new id), then
    full chunks written as they come, fences and Bloom filter kept; `finish` completes the
    catalog row."""

    def __init__(self, db: sqlite3.Connection, expected: int) -> None:
        self.db, self.rows = db, 0
        self.id = int(db.execute("INSERT INTO runs VALUES (NULL, 0, x'', x'')").lastrowid or 0)
        blocks = max(1, -(-BLOOM_BITS * expected // 512))  # 64-byte blocks (csrc/runs.h)
        self.bloom = bytearray(64 * blocks)
        self._fences: list[bytes] = []
        self._pending = b""
        db.execute(f"CREATE TABLE {table(self.id)} (chunk INTEGER PRIMARY KEY, data BLOB NOT NULL)")

    def add(self, records: bytes) -> None:
        _core.run_bloom_add(self.bloom, records, RECORD.size)
        self.rows += len(records) // RECORD.size
        data = self._pending + records if self._pending else records
        size = CHUNK * RECORD.size
        whole = len(data) - len(data) % size
        self._write([data[i : i + size] for i in range(0, whole, size)])
        self._pending = data[whole:]

    def _write(self, chunks: list[bytes]) -> None:
        first = len(self._fences)
        self._fences += [chunk[:FP_BYTES] for chunk in chunks]
        self.db.executemany(
            f"INSERT INTO {table(self.id)} VALUES (?, ?)",
            ((first + i, chunk) for i, chunk in enumerate(chunks)),
        )

    def finish(self) -> Run:
        if self._pending:
            self._write([self._pending])
        fences, bloom = b"".join(self._fences), bytes(self.bloom)
        self.db.execute(
            "UPDATE runs SET rows = ?, fences = ?, bloom = ? WHERE id = ?",
            (self.rows, fences, bloom, self.id),
        )
        return Run(self.id, self.rows, fences, bloom)


def _windows(db: sqlite3.Connection, name: str) -> Iterator[bytes]:
    """A run's records, WINDOW chunks at a time, a statement each (no cursor left open)."""
    last = -1
    sql = f"SELECT chunk, data FROM {name} WHERE chunk > ? ORDER BY chunk LIMIT {WINDOW}"
    while rows := db.execute(sql, (last,)).fetchall():
        last = rows[-1][0]
        yield b"".join(data for _, data in rows)


class Runs:
    """The live runs of one connection, oldest first, read from the catalog."""

    def __init__(self, db: sqlite3.Connection, known: Sequence[Run] = ()) -> None:
        """Read the catalog; the fences and Bloom filters of the runs in `known` (read before
        from this file) are kept, not read again."""
        self.db = db
        kept = {run.id: run for run in known}
        self.runs = []
        for run_id, rows in db.execute("SELECT id, rows FROM runs ORDER BY id").fetchall():
            run = kept.get(run_id)
            if run is None:
                sql = "SELECT fences, bloom FROM runs WHERE id = ?"
                run = Run(run_id, rows, *db.execute(sql, (run_id,)).fetchone())
            run.rows = rows
            self.runs.append(run)

    @property
    def tables(self) -> list[str]:
        return [run.table for run in self.runs]

    def named(self) -> list[tuple[int, str]]:
        """(id, table) of each run, oldest first."""
        return [(run.id, run.table) for run in self.runs]

    def _catalog_changed(self) -> None:
        """The view follows the catalog (in the same transaction)."""
        self.db.execute(f"DROP VIEW {VIEW}")
        self.db.execute(view_of(self.tables))

    def _drop(self, gone: Sequence[Run]) -> None:
        for run in gone:
            self.db.execute(f"DROP TABLE {run.table}")
            self.db.execute("DELETE FROM runs WHERE id = ?", (run.id,))
        ids = {run.id for run in gone}
        self.runs = [run for run in self.runs if run.id not in ids]

    # -- writes ---------------------------------------------------------------------------

    def write(self, records: bytes) -> None:
        """A new run of records (csrc/runs.h: sorted, distinct)."""
        writer = RunWriter(self.db, len(records) // RECORD.size)
        writer.add(records)
        self.runs.append(writer.finish())
        self._catalog_changed()

    def merge(self, chosen: Sequence[Run]) -> int:
        """Merge the runs `chosen` into one new run, a window of each at a time. A fingerprint
        in more than one of them (a caller's wrong known_absent) keeps the oldest run's record.
        Returns how many repeats went."""
        chosen = sorted(chosen, key=lambda run: run.id)
        writer = RunWriter(self.db, sum(run.rows for run in chosen))
        sources = [_windows(self.db, run.table) for run in chosen]
        buffers = [memoryview(next(source, b"")) for source in sources]
        more = [bool(buffer) for buffer in buffers]  # the run may have records after these
        repeats = 0
        while any(buffers):
            # Everything up to the smallest last key of a run with more to come is final.
            ends = [bytes(b[-RECORD.size :][:FP_BYTES]) for b, m in zip(buffers, more) if m]  # noqa: B905
            out, used, dropped = _core.run_merge(list(buffers), min(ends) if ends else None)
            writer.add(out)
            repeats += dropped
            for i, source in enumerate(sources):
                buffers[i] = buffers[i][used[i] * RECORD.size :]
                if not buffers[i] and more[i]:
                    buffers[i] = memoryview(next(source, b""))
                    more[i] = bool(buffers[i])
        self._drop(chosen)
        self.runs.append(writer.finish())
        self._catalog_changed()
        return repeats

    def compact(self, base: int) -> int:
        """Merge while some tier holds TIER_FACTOR runs (smallest tier first); the repeats
        that went (see merge)."""
        gone = 0
        while True:
            tiers: defaultdict[int, list[Run]] = defaultdict(list)
            for run in self.runs:
                tiers[tier(run.rows, base)].append(run)
            full = [runs for _, runs in sorted(tiers.items()) if len(runs) >= TIER_FACTOR]
            if not full:
                return gone
            gone += self.merge(full[0])

    def merge_all(self) -> int:
        """One run holding every record (the repeats that went)."""
        return self.merge(self.runs) if len(self.runs) > 1 else 0

    def _rewrite(
        self, fps: Sequence[bytes], change: Callable[[bytearray, int, bytes], bool]
    ) -> int:
        """Apply change(data, record index, fp) to each record of fps in every run that holds
        it (change says whether it removed the record); rewrites the chunks touched. Returns
        the records removed."""
        removed_all = 0
        for run in self.runs:
            removed, changed = 0, []
            for chunk, data, keys in self._chunks(run, fps):
                edited, touched = bytearray(data), False
                for fp in sorted(keys, reverse=True):  # a removal moves only later records
                    at = _core.run_find(edited, fp)
                    if at >= 0:
                        touched = True
                        removed += change(edited, at, fp)
                if touched:
                    changed.append((bytes(edited), chunk))
            sql = f"UPDATE {run.table} SET data = ? WHERE chunk = ?"
            self.db.executemany(sql, changed)
            if removed:
                run.rows -= removed
                self.db.execute("UPDATE runs SET rows = ? WHERE id = ?", (run.rows, run.id))
                removed_all += removed
        if empty := [run for run in self.runs if run.rows <= 0]:
            self._drop(empty)
            self._catalog_changed()
        return removed_all

    def delete(self, fps: Sequence[bytes]) -> int:
        """Delete fingerprints from every run (an emptied run goes); how many were deleted."""

        def remove(data: bytearray, at: int, fp: bytes) -> bool:
            del data[at * RECORD.size : (at + 1) * RECORD.size]
            return True

        return self._rewrite(sorted(set(fps)), remove)

    def update_refs(self, order: list[bytes], pairs: list[list[int]]) -> None:
        """Add [delta, last seen ms] to the records of the sorted fingerprints `order`, in
        whichever run holds them."""
        deltas = dict(zip(order, pairs, strict=True))

        def add(data: bytearray, at: int, fp: bytes) -> bool:
            _, refs, first, last = RECORD.unpack_from(data, at * RECORD.size)
            delta, seen = deltas[fp]
            RECORD.pack_into(data, at * RECORD.size, fp, refs + delta, first, max(last, seen))
            return False

        self._rewrite(order, add)

    # -- reads ----------------------------------------------------------------------------

    def _chunks(self, run: Run, fps: Sequence[bytes]) -> Iterator[tuple[int, bytes, list[bytes]]]:
        """(chunk, data, the fps it would hold) for each chunk of run that its Bloom filter
        and fence pointers name for fps: one statement for them all."""
        by_chunk: defaultdict[int, list[bytes]] = defaultdict(list)
        for fp in run.candidates(fps):
            by_chunk[run.chunk_of(fp)].append(fp)
        if not by_chunk:
            return
        sql = f"SELECT chunk, data FROM {run.table} WHERE chunk IN (SELECT value FROM json_each(?))"
        for chunk, data in self.db.execute(sql, (json.dumps(sorted(by_chunk)),)).fetchall():
            yield chunk, data, by_chunk[chunk]

    def _found(self, run: Run, fps: Sequence[bytes]) -> dict[bytes, tuple[int, int, int]]:
        """The records of fps that run holds: its Bloom filter first, then the chunks the
        candidates fall in."""
        found = {}
        for _, data, keys in self._chunks(run, fps):
            for fp in keys:
                at = _core.run_find(data, fp)
                if at >= 0:
                    found[fp] = RECORD.unpack_from(data, at * RECORD.size)[1:]
        return found

    def present(self, fps: Sequence[bytes]) -> set[bytes]:
        """Which of fps some run holds, each run asked only for those not found yet."""
        found: set[bytes] = set()
        rest = sorted(set(fps))
        for run in self.runs:
            if not rest:
                break
            if hits := self._found(run, rest).keys():
                found |= hits
                rest = [fp for fp in rest if fp not in hits]
        return found

    def record(self, fp: bytes) -> tuple[int, int, int] | None:
        """(refs, first seen ms, last seen ms) of fp in the oldest run holding it."""
        for run in self.runs:
            if (rec := self._found(run, [fp]).get(fp)) is not None:
                return rec
        return None

    def chunks(self, name: str) -> Iterator[bytes]:
        """The data of each chunk of run table `name`, in key order."""
        for window in _windows(self.db, name):
            size = CHUNK * RECORD.size
            yield from (window[i : i + size] for i in range(0, len(window), size))

    def older_than(self, column: str, limit: int) -> list[tuple[bytes, int, int, int]]:
        """Every run's records whose `column` (first_seen or last_seen) is below limit."""
        at = 2 if column == "first_seen" else 3
        return [
            rec
            for run in self.runs
            for data in self.chunks(run.table)
            for rec in RECORD.iter_unpack(data)
            if rec[at] < limit
        ]

    def check(self) -> None:
        """ValueError unless every run's chunks hold whole records, as many as the catalog
        says, with a fence pointer each."""
        for run in self.runs:
            sql = f"SELECT count(*), sum(length(data)), sum(length(data) % ?) FROM {run.table}"
            chunks, size, torn = self.db.execute(sql, (RECORD.size,)).fetchone()
            stored = (size or 0) // RECORD.size
            if torn or chunks != len(run.fences):
                raise ValueError(f"run {run.id} has torn chunks or lost fence pointers")
            if stored != run.rows:
                raise ValueError(
                    f"run {run.id} holds {stored} records, its catalog says {run.rows}"
                )


class SingleTree:
    """A version-1 or -2 file's records as they are: one B-tree, `fingerprints`, a row each.
    Only read (by a reader; a writer migrates the file first, `into_run`)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.runs: list[Run] = []

    def named(self) -> list[tuple[int, str]]:
        return [(0, VIEW)]

    def chunks(self, name: str) -> Iterator[bytes]:
        """Its records packed as a run's (csrc/runs.h), CHUNK at a time, in key order."""
        last = b""
        sql = f"SELECT {FIELDS} FROM {VIEW} WHERE fp > ? ORDER BY fp LIMIT {CHUNK}"
        while rows := self.db.execute(sql, (last,)).fetchall():
            last = rows[-1][0]
            yield b"".join(RECORD.pack(*row) for row in rows)

    def present(self, fps: Sequence[bytes]) -> set[bytes]:
        sql = ROWS + f"SELECT fp FROM {VIEW} WHERE fp IN (SELECT fp FROM batch)"
        return {row[0] for row in self.db.execute(sql, packed(sorted(set(fps))))}

    def record(self, fp: bytes) -> tuple[int, int, int] | None:
        sql = f"SELECT refs, first_seen, last_seen FROM {VIEW} WHERE fp = ?"
        row = self.db.execute(sql, (fp,)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def older_than(self, column: str, limit: int) -> list[tuple[bytes, int, int, int]]:
        sql = f"SELECT {FIELDS} FROM {VIEW} WHERE {column} < ?"
        return list(self.db.execute(sql, (limit,)).fetchall())

    def check(self) -> None:
        """Nothing beyond SQLite's own checks (a row is a record)."""

    def into_run(self) -> None:
        """Make the B-tree the first run (in the caller's transaction), then the view."""
        (rows,) = self.db.execute(f"SELECT count(*) FROM {VIEW}").fetchone()
        if not rows:
            self.db.execute(f"DROP TABLE {VIEW}")
            self.db.execute(EMPTY_VIEW)
            return
        writer = RunWriter(self.db, rows)
        for data in self.chunks(VIEW):
            writer.add(data)
        self.db.execute(f"DROP TABLE {VIEW}")
        self.db.execute(view_of([writer.finish().table]))


def scan(current: Callable[[], Runs | SingleTree], chunk: int) -> Iterator[list[bytes]]:
    """Every run's fingerprints in lists of at most `chunk`, a statement per window (no cursor
    left open across a caller's writes). `current` gives the runs as they are now: a run merged
    away meanwhile is read in the run that took it, newer than every run read (repeats, never
    a loss)."""
    done = -1  # the newest run read
    while True:
        runs = current()
        later = [(run, name) for run, name in runs.named() if run > done]
        if not later:
            return
        for _, name in later:
            try:
                for data in runs.chunks(name):
                    fps = [data[i : i + FP_BYTES] for i in range(0, len(data), RECORD.size)]
                    yield from (fps[i : i + chunk] for i in range(0, len(fps), chunk))
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                # merged meanwhile: read later in its new run
        done = later[-1][0]
