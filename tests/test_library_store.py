"""The fingerprint library protocol (exact/library_protocol.py): MemoryLibrary and
SQLiteLibrary must behave the same, since ExactFilter is tested mostly on the first and runs on
the second; and the SQLite file must refuse what is not a urlseen library, stay single-writer,
and keep its data.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import random
import sqlite3
from pathlib import Path

import pytest

from urlseen import FormatError, ReadOnlyError, StateInUseError
from urlseen.exact.library_protocol import Changes, LibraryIO, Record
from urlseen.exact.memory_library import MemoryLibrary
from urlseen.exact.sqlite_library import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    STORED_RECORDS,
    SQLiteLibrary,
)

KINDS = ["memory", "sqlite"]


def fp(i: int) -> bytes:
    return hashlib.md5(str(i).encode()).digest()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return str(request.param)


@pytest.fixture
def lib_path(tmp_path: Path) -> Path:
    return tmp_path / "library.sqlite"


@pytest.fixture
def lib(kind: str, lib_path: Path):
    library = MemoryLibrary() if kind == "memory" else SQLiteLibrary(lib_path, create=True)
    yield library
    library.close()


# ---- the protocol, both implementations --------------------------------------------------------


def test_an_empty_library(lib):
    assert lib.count() == 0 and lib.readonly is False
    assert lib.present([fp(1)]) == set() and lib.present([]) == set()
    assert lib.records([fp(1)]) == {}
    assert list(lib.fingerprints()) == []
    assert lib.older_than(1e12) == [] and lib.overflow([0, 1]) == {}
    assert lib.get_meta("no-such-name") is None
    assert isinstance(lib.io, LibraryIO)


def test_inserts_refs_and_deletes(lib):
    lib.apply(Changes(1000.1234, inserts=[fp(1), fp(2), fp(3)]))
    assert lib.count() == 3
    assert lib.records([fp(1), fp(9)]) == {fp(1): Record(1, 1000.123, 1000.123)}  # milliseconds
    lib.apply(Changes(2000.0, refs={fp(1): 2, fp(2): 1}))
    assert lib.records([fp(1)])[fp(1)] == Record(3, 1000.123, 2000.0), "first_seen stays"
    lib.apply(Changes(3000.0, inserts=[fp(4)], refs={fp(1): -1}, deletes=[fp(2)]))
    assert lib.count() == 3
    assert lib.present([fp(i) for i in range(6)]) == {fp(1), fp(3), fp(4)}
    assert lib.records([fp(1), fp(4)]) == {
        fp(1): Record(2, 1000.123, 3000.0),
        fp(4): Record(1, 3000.0, 3000.0),
    }
    # A fingerprint inserted and referenced in one batch (a key repeated in a batch).
    lib.apply(Changes(4000.0, inserts=[fp(5)], refs={fp(5): 2}))
    assert lib.records([fp(5)])[fp(5)].refs == 3
    assert lib.io.writes == 3 + 2 + 3 + 2
    lib.apply(Changes(5000.0))  # an empty batch writes nothing
    assert lib.io.writes == 10 and lib.count() == 4


def test_present_batched_and_one_by_one(lib):
    lib.apply(Changes(1.0, inserts=[fp(i) for i in range(0, 6000, 2)]))
    queries = [fp(i) for i in range(5000)] + [fp(0), fp(1)]  # over one statement, repeats
    expected = {fp(i) for i in range(0, 5000, 2)}
    io = lib.io
    before = (io.lookups, io.round_trips)
    assert lib.present(queries) == expected
    assert io.lookups - before[0] == len(queries)
    small = [fp(2), fp(3), fp(4)]
    before = (io.lookups, io.round_trips)
    assert lib.present(small, batched=False) == lib.present(small, batched=True) == {fp(2), fp(4)}
    assert io.lookups - before[0] == 6
    assert io.round_trips - before[1] == 3 + 1, "one by one: a round trip each; batched: one"


def test_overflow_table_and_metadata(lib):
    lib.apply(Changes(1.0, overflow={5: 17, 9: 3}, meta={"counters": "abc"}))
    assert lib.overflow([5, 9, 11]) == {5: 17, 9: 3}
    assert lib.overflow(iter([9])) == {9: 3}
    lib.apply(Changes(2.0, overflow={5: None, 9: 4}))
    assert lib.overflow(range(20)) == {9: 4}
    assert lib.get_meta("counters") == "abc"
    lib.replace_overflow({1: 15, 2: 16}, {"counters": ""})
    assert lib.overflow(range(20)) == {1: 15, 2: 16} and lib.get_meta("counters") == ""
    assert lib.count() == 0, "overflow rows and metadata are not records"


def test_fingerprints_in_chunks(lib):
    lib.apply(Changes(1.0, inserts=[fp(i) for i in range(100)]))
    chunks = list(lib.fingerprints(chunk=7))
    assert all(1 <= len(c) <= 7 for c in chunks) and len(chunks) == 15
    flat = [x for c in chunks for x in c]
    assert len(flat) == 100 and set(flat) == {fp(i) for i in range(100)}
    assert sorted(x for c in lib.fingerprints() for x in c) == sorted(flat)


def test_older_than(lib):
    lib.apply(Changes(100.0, inserts=[fp(1), fp(2)]))
    lib.apply(Changes(200.0, inserts=[fp(3)]))
    lib.apply(Changes(300.0, refs={fp(1): 1}))
    assert set(lib.older_than(150.0)) == {fp(1), fp(2)}
    assert set(lib.older_than(150.0, by="last_seen")) == {fp(2)}
    assert set(lib.older_than(250.0, by="last_seen")) == {fp(2), fp(3)}
    assert lib.older_than(100.0) == [], "strictly older"
    assert set(lib.older_than(100.001)) == {fp(1), fp(2)}


def test_older_than_rejects_an_unknown_column(lib):
    with pytest.raises(ValueError, match="by must be"):
        lib.older_than(1.0, by="bogus")


def test_inconsistent_changes_are_refused_whole(lib):
    lib.apply(Changes(1.0, inserts=[fp(1)]))
    with pytest.raises((ValueError, sqlite3.IntegrityError)):
        lib.apply(Changes(2.0, inserts=[fp(2), fp(1)], meta={"x": "y"}))
    assert lib.count() == 1 and lib.present([fp(2)]) == set() and lib.get_meta("x") is None
    assert lib.records([fp(1)])[fp(1)] == Record(1, 1.0, 1.0)


def test_transaction_rolls_back_on_exception(lib):
    lib.apply(Changes(1.0, inserts=[fp(1)]))
    with pytest.raises(RuntimeError), lib.transaction():
        lib.apply(Changes(2.0, inserts=[fp(2)], refs={fp(1): 1}, overflow={3: 20}))
        assert lib.present([fp(2)]) == {fp(2)}, "a transaction sees its own writes"
        raise RuntimeError("the caller failed")
    assert lib.count() == 1 and lib.present([fp(2)]) == set()
    assert lib.records([fp(1)])[fp(1)].refs == 1 and lib.overflow([3]) == {}


def test_nested_transactions_commit_once(lib):
    with lib.transaction():
        with lib.transaction():
            lib.apply(Changes(1.0, inserts=[fp(1)]))
        lib.apply(Changes(1.0, inserts=[fp(2)]))
    assert lib.count() == 2


def test_deleting_an_absent_fingerprint_keeps_the_count(lib):
    lib.apply(Changes(1.0, inserts=[fp(1), fp(2)]))
    lib.apply(Changes(2.0, deletes=[fp(9), fp(2), fp(2)]))
    assert lib.count() == 1 == len(lib.present([fp(1), fp(2), fp(9)]))


def test_io_accounting_is_the_same(lib_path):
    libs = [MemoryLibrary(), SQLiteLibrary(lib_path, create=True)]
    for lib in libs:
        lib.apply(Changes(1.0, inserts=[fp(1), fp(2)]))
        lib.present([fp(1), fp(3)])
        lib.present([])
        lib.records([fp(1), fp(5)])
    assert libs[0].io == libs[1].io
    libs[1].close()


# ---- SQLiteLibrary: the file ---------------------------------------------------------------


def make_file(path: Path, n: int = 3000) -> None:
    lib = SQLiteLibrary(path, create=True)
    lib.apply(Changes(1.0, inserts=[fp(i) for i in range(n)], overflow={7: 16}, meta={"a": "b"}))
    lib.close()


def test_the_file_is_marked_and_reopens_with_its_data(lib_path):
    make_file(lib_path, 100)
    db = sqlite3.connect(lib_path)
    assert db.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    # at rest a rollback journal (nothing beside the file to read or lose); WAL while written
    assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    db.close()
    lib = SQLiteLibrary(lib_path)
    library_id = lib.get_meta("library_id")
    assert lib.count() == 100 and len(lib.present([fp(i) for i in range(200)])) == 100
    assert lib.overflow([7]) == {7: 16} and lib.get_meta("a") == "b"
    assert lib.get_meta("fingerprint") == "md5" and len(library_id or "") == 32
    lib.apply(Changes(2.0, deletes=[fp(0)]))
    assert lib._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)  # from its first write
    lib.verify()
    lib.close()
    lib.close()  # idempotent
    with pytest.raises(FileExistsError):
        SQLiteLibrary(lib_path, create=True)
    with pytest.raises(FileNotFoundError):
        SQLiteLibrary(lib_path.with_name("missing.sqlite"))
    again = SQLiteLibrary(lib_path, readonly=True, durable=True)
    assert again.count() == 99 and again.get_meta("library_id") == library_id
    again.close()


def test_readonly_refuses_writes(lib_path):
    make_file(lib_path, 10)
    before = sha(lib_path)
    lib = SQLiteLibrary(lib_path, readonly=True)
    assert lib.readonly and lib.count() == 10 and fp(3) in lib.present([fp(3)])
    for write in (
        lambda: lib.apply(Changes(2.0, inserts=[fp(99)])),
        lambda: lib.apply(Changes(2.0, meta={"x": "y"})),
        lambda: lib.replace_overflow({}, {}),
        lambda: lib.transaction().__enter__(),
    ):
        with pytest.raises(ReadOnlyError):
            write()
    lib.close()
    assert sha(lib_path) == before


def test_one_writer_at_a_time_and_readers_beside_it(lib_path):
    make_file(lib_path, 10)
    writer = SQLiteLibrary(lib_path)
    with pytest.raises(StateInUseError):
        SQLiteLibrary(lib_path)
    # Readers take no lock (WAL): they see what the writer has committed.
    reader = SQLiteLibrary(lib_path, readonly=True)
    writer.apply(Changes(2.0, inserts=[fp(100)]))  # the refused open did not disturb it
    assert reader.count() == 11 and reader.present([fp(100)]) == {fp(100)}
    with pytest.raises(ReadOnlyError):
        reader.apply(Changes(3.0, inserts=[fp(101)]))
    writer.close()
    SQLiteLibrary(lib_path).close()  # the lock went with the writer
    reader.close()


def refused(path: Path, *fragments: str) -> None:
    for readonly in (True, False):
        with pytest.raises(FormatError) as info:
            SQLiteLibrary(path, readonly=readonly)
        message = str(info.value)
        del info
        gc.collect()  # see test_a_failed_open_does_not_close_a_reused_descriptor
        assert str(path) in message
        for fragment in fragments:
            assert fragment in message, message


@pytest.mark.parametrize(
    "content",
    [
        random.Random(4).randbytes(20_000),
        b"SQLite format 3\x00" + random.Random(5).randbytes(8000),
        b"https://example.com/\n" * 1000,
        b"\x89URLSEEN" + bytes(5000),
    ],
    ids=["random", "sqlite-magic-then-garbage", "text", "a-urlseen-state-file"],
)
def test_garbage_is_refused(lib_path, content):
    lib_path.write_bytes(content)
    refused(lib_path, "not a readable urlseen library")


def test_a_foreign_sqlite_database_is_refused(lib_path):
    db = sqlite3.connect(lib_path)
    db.execute("CREATE TABLE fingerprints (fp BLOB)")
    db.commit()
    db.close()
    refused(lib_path, "not a urlseen library")


@pytest.mark.parametrize("content", ["foreign-db", "empty"])
def test_a_refused_file_is_left_alone(lib_path, content):
    if content == "empty":
        lib_path.write_bytes(b"")
    else:
        db = sqlite3.connect(lib_path)
        db.execute("CREATE TABLE t (x)")
        db.commit()
        db.close()
    before = sha(lib_path)
    with pytest.raises(FormatError):
        SQLiteLibrary(lib_path)
    gc.collect()
    assert sha(lib_path) == before


def test_our_application_id_without_our_schema_is_refused(lib_path):
    db = sqlite3.connect(lib_path)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    refused(lib_path, "not")


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 99])
def test_a_newer_version_is_refused(lib_path, version):
    make_file(lib_path, 10)
    db = sqlite3.connect(lib_path)
    db.execute(f"PRAGMA user_version={version}")
    db.commit()
    db.close()
    refused(lib_path, f"version {version}", "newer")


def test_missing_metadata_is_refused(lib_path):
    make_file(lib_path, 10)
    db = sqlite3.connect(lib_path)
    db.execute("DELETE FROM meta WHERE name = 'records'")
    db.commit()
    db.close()
    refused(lib_path, "without its metadata")


def test_verify_finds_any_damaged_page(lib_path):
    make_file(lib_path)
    db = sqlite3.connect(lib_path)
    (page_size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    good = lib_path.read_bytes()
    pages = len(good) // page_size
    assert pages >= 6, "test precondition: a multi-page library"
    for page in range(1, pages):  # every page but the header page
        raw = bytearray(good)
        raw[page * page_size : (page + 1) * page_size] = random.Random(page).randbytes(page_size)
        damaged = lib_path.with_name(f"damaged{page}.sqlite")
        damaged.write_bytes(bytes(raw))
        with pytest.raises(FormatError) as info:
            lib = SQLiteLibrary(damaged, readonly=True)
            try:
                lib.verify()
            finally:
                lib.close()
        assert str(damaged) in str(info.value)
        del info
        gc.collect()
    lib = SQLiteLibrary(lib_path, readonly=True)
    lib.verify()
    lib.close()


def test_a_failed_open_does_not_close_a_reused_descriptor(lib_path):
    lib_path.write_bytes(random.Random(6).randbytes(8192))
    try:
        SQLiteLibrary(lib_path)
    except FormatError as exc:
        kept = exc  # kept alive, as pytest.raises or a logger would
    fd = os.open(os.devnull, os.O_RDONLY)  # takes the freed descriptor number
    try:
        del kept
        gc.collect()
        os.fstat(fd)  # EBADF if the collected library closed it
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


# ---- SQLiteLibrary: the stage (exact/staging.py) ---------------------------------------------


def _same_contents(a, b, universe: list[bytes]) -> None:
    """Two libraries answer every read alike over `universe`."""
    assert a.count() == b.count()
    assert a.present(universe) == b.present(universe)
    assert a.records(universe) == b.records(universe)
    assert sorted(x for c in a.fingerprints(chunk=5) for x in c) == sorted(
        x for c in b.fingerprints(chunk=5) for x in c
    )
    for by in ("first_seen", "last_seen"):
        for when in (0.0, 150.0, 1e12):
            assert sorted(a.older_than(when, by=by)) == sorted(b.older_than(when, by=by))


@pytest.mark.parametrize("stage_limit", [1, 7, 50, 10**9])
def test_staged_changes_read_as_the_memory_library(lib_path, stage_limit):
    """Random batches of inserts, reference changes and deletes: the SQLite library, whose
    stage is merged every `stage_limit` staged fingerprints (or never), reopened now and then,
    answers every read as MemoryLibrary does."""
    rng = random.Random(stage_limit)
    universe = [fp(i) for i in range(120)]
    memory = MemoryLibrary()
    disk = SQLiteLibrary(lib_path, create=True, stage_limit=stage_limit)
    try:
        for step in range(60):
            present = memory.present(universe)
            absent = [f for f in universe if f not in present]
            changes = Changes(100.0 + 3 * step)
            changes.inserts = rng.sample(absent, min(len(absent), rng.randrange(0, 12)))
            changes.refs = {f: rng.randrange(-1, 4) for f in rng.sample(universe, 10)}
            changes.seen = {f: 90.0 + 4 * step for f in list(changes.refs)[:3]}
            if step % 5 == 4:
                changes.deletes = rng.sample(universe, 6)
            for library in (memory, disk):
                library.apply(changes)
            _same_contents(memory, disk, universe)
            if step % 9 == 8:  # the stage is read back from the file
                disk.close()
                disk = SQLiteLibrary(lib_path, stage_limit=stage_limit)
                _same_contents(memory, disk, universe)
        disk.close()
        reader = SQLiteLibrary(lib_path, readonly=True)
        _same_contents(memory, reader, universe)
        reader.close()
    finally:
        disk.close()


def test_a_batch_is_one_staged_row_until_the_merge(lib_path):
    lib = SQLiteLibrary(lib_path, create=True, stage_limit=250)
    lib.apply(Changes(1.0, inserts=[fp(i) for i in range(100)]))
    lib.apply(Changes(2.0, inserts=[fp(i) for i in range(100, 200)], refs={fp(3): 2}))

    def rows() -> tuple[int, int, int]:
        db = sqlite3.connect(f"{lib_path.as_uri()}?mode=ro", uri=True)
        try:
            (main,) = db.execute("SELECT count(*) FROM fingerprints").fetchone()
            (staged,) = db.execute("SELECT count(*) FROM staged").fetchone()
            (records,) = db.execute(STORED_RECORDS).fetchone()
            return main, staged, records
        finally:
            db.close()

    assert rows() == (0, 3, 200), "two insert rows and one delta row, nothing in the B-tree"
    lib.apply(Changes(3.0, inserts=[fp(i) for i in range(200, 260)]))  # 261 staged: merged
    assert rows() == (260, 0, 260)
    assert lib.records([fp(3)]) == {fp(3): Record(3, 1.0, 2.0)}
    lib.close()


def test_a_rolled_back_batch_leaves_the_stage_as_committed(lib_path):
    lib = SQLiteLibrary(lib_path, create=True, stage_limit=5)
    lib.apply(Changes(1.0, inserts=[fp(1), fp(2)]))
    with pytest.raises(RuntimeError), lib.transaction():
        lib.apply(Changes(2.0, inserts=[fp(i) for i in range(3, 10)]))  # merged inside
        lib.apply(Changes(2.0, refs={fp(1): 5}))
        raise RuntimeError("the caller failed")
    assert lib.present([fp(i) for i in range(10)]) == {fp(1), fp(2)}
    assert lib.records([fp(1)]) == {fp(1): Record(1, 1.0, 1.0)}
    with pytest.raises(ValueError, match="inconsistent"):
        lib.apply(Changes(3.0, inserts=[fp(3), fp(3)]))
    with pytest.raises(ValueError, match="inconsistent"):
        lib.apply(Changes(3.0, inserts=[fp(4), fp(2)]))
    assert lib.count() == 2 and lib.present([fp(3), fp(4)]) == set()
    lib.close()


def _version_1_file(path: Path, fill: bool = True, version: int = 1) -> None:
    """A library as urlseen wrote it before the stage (made here with 50 records, or the one at
    path): one B-tree `fingerprints` holding every record, no staged table, no runs, format
    "urlseen-library", user_version 1; or, with version=2, as it wrote it before the runs (the
    same with an empty stage, format "urlseen-library-2")."""
    if fill:
        make_file(path, 50)
    db = sqlite3.connect(path)
    db.execute("BEGIN")
    assert db.execute("SELECT count(*) FROM runs").fetchone() == (0,), "every record staged"
    db.execute("DROP VIEW fingerprints")
    db.execute("DROP TABLE runs")
    db.execute(
        "CREATE TABLE fingerprints (fp BLOB PRIMARY KEY, refs INTEGER NOT NULL, "
        "first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL) WITHOUT ROWID"
    )
    for now, fps in db.execute("SELECT now, fps FROM staged WHERE deltas IS NULL").fetchall():
        db.executemany(
            "INSERT INTO fingerprints VALUES (?, 1, ?, ?)",
            [(fps[i : i + 16], now, now) for i in range(0, len(fps), 16)],
        )
    if version == 1:
        db.execute("DROP TABLE staged")
    else:
        db.execute("DELETE FROM staged")
    name = "urlseen-library" if version == 1 else f"urlseen-library-{version}"
    db.execute("UPDATE meta SET value = ? WHERE name = 'format'", (name,))
    db.execute(f"PRAGMA user_version={version}")
    db.commit()
    db.close()
    Path(str(path) + ".seal").unlink()  # the bytes changed


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_library_is_read_and_migrated_by_its_first_writer(lib_path, version):
    _version_1_file(lib_path, version=version)
    before = sha(lib_path)
    reader = SQLiteLibrary(lib_path, readonly=True)
    assert reader.count() == 50 and len(reader.present([fp(i) for i in range(60)])) == 50
    reader.close()
    assert sha(lib_path) == before, "a reader leaves an older file as it is"
    writer = SQLiteLibrary(lib_path)
    writer.apply(Changes(2.0, inserts=[fp(70)]))
    writer.close()
    db = sqlite3.connect(lib_path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (3,)
    assert db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone() == (
        "urlseen-library-3",
    )
    assert db.execute("SELECT id, rows FROM runs").fetchall() == [(1, 50)], "the B-tree"
    db.close()
    lib = SQLiteLibrary(lib_path)
    assert lib.count() == 51 and len(lib.present([fp(i) for i in range(71)])) == 51
    lib.close()


def test_a_version_2_library_without_its_stage_is_refused(lib_path):
    make_file(lib_path, 10)
    db = sqlite3.connect(lib_path)
    db.execute("DROP TABLE staged")
    db.commit()
    db.close()
    Path(str(lib_path) + ".seal").unlink(missing_ok=True)
    refused(lib_path, "staging table")


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        ("UPDATE staged SET fps = substr(fps, 1, 20)", "damaged staged row"),
        ("UPDATE meta SET value = '7' WHERE name = 'records'", "its count says 7"),
    ],
)
def test_verify_reads_the_stage_and_counts_the_records(lib_path, damage, needle):
    """Damage SQLite cannot see (well-formed pages, wrong contents), in a file its writer did
    not seal: verify() finds it."""
    make_file(lib_path, 10)
    db = sqlite3.connect(lib_path)
    db.execute(damage)
    db.commit()
    db.close()
    Path(str(lib_path) + ".seal").unlink()
    lib = SQLiteLibrary(lib_path, readonly=True)
    with pytest.raises(FormatError, match=needle):
        lib.verify()
    lib.close()


def test_a_reader_sees_what_a_writer_stages_and_merges_after_it_opened(lib_path):
    writer = SQLiteLibrary(lib_path, create=True, stage_limit=100)
    writer.apply(Changes(1.0, inserts=[fp(i) for i in range(10)]))
    reader = SQLiteLibrary(lib_path, readonly=True, check_seal=False)
    assert len(reader.present([fp(i) for i in range(300)])) == 10
    writer.apply(Changes(2.0, inserts=[fp(i) for i in range(10, 50)]))  # staged
    assert len(reader.present([fp(i) for i in range(300)])) == 50
    writer.apply(Changes(3.0, inserts=[fp(i) for i in range(50, 150)]))  # merged
    assert len(reader.present([fp(i) for i in range(300)])) == 150
    assert reader.records([fp(3)]) == {fp(3): Record(1, 1.0, 1.0)}
    assert sum(len(c) for c in reader.fingerprints()) == 150
    reader.close()
    writer.close()


def test_a_wrong_known_absent_costs_no_record_and_no_stuck_merge(lib_path):
    """known_absent skips the look-up of inserts in the runs; an insert a run holds after all
    is counted until the runs holding it are merged, which keeps the older record and brings
    the count back to the distinct fingerprints; the rows always agree with the count."""
    lib = SQLiteLibrary(lib_path, create=True, stage_limit=3)
    lib.apply(Changes(1.0, inserts=[fp(1), fp(2), fp(3)]))  # run 1
    with pytest.raises(ValueError, match="inconsistent"):
        lib.apply(Changes(2.0, inserts=[fp(1)]))  # looked up: refused
    lib.apply(Changes(2.0, inserts=[fp(1), fp(4), fp(5)], known_absent=True))  # run 2
    assert lib.present([fp(i) for i in range(8)]) == {fp(i) for i in range(1, 6)}
    assert lib.records([fp(1)]) == {fp(1): Record(1, 1.0, 1.0)}, "the older run's record"
    assert lib.count() == 6 == stored_records(lib_path), "the repeat is counted, in both"
    lib.compact()
    assert lib.count() == 5 and lib.records([fp(1)]) == {fp(1): Record(1, 1.0, 1.0)}
    lib.close()
    assert stored_records(lib_path) == 5


def stored_records(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute(STORED_RECORDS).fetchone()[0])
    finally:
        db.close()


def run_sizes(path: Path) -> list[int]:
    db = sqlite3.connect(path)
    try:
        return [rows for _, rows in db.execute("SELECT id, rows FROM runs ORDER BY id")]
    finally:
        db.close()


def test_runs_are_merged_by_size_tier(lib_path):
    """Every 4 runs of one tier become one of the next: after 16 stages of 10 records, one run
    of 160; after 7 more, that run, one of 40 and three of 10 (exact/runs.py)."""
    lib = SQLiteLibrary(lib_path, create=True, stage_limit=10)
    for i in range(16):
        lib.apply(Changes(float(i), inserts=[fp(i * 10 + j) for j in range(10)]))
    assert lib.count() == 160
    lib.close()
    assert run_sizes(lib_path) == [160]
    lib = SQLiteLibrary(lib_path, stage_limit=10)
    for i in range(16, 23):
        lib.apply(Changes(float(i), inserts=[fp(i * 10 + j) for j in range(10)]))
    assert lib.present([fp(i) for i in range(300)]) == {fp(i) for i in range(230)}
    assert lib.records([fp(0), fp(229)]) == {
        fp(0): Record(1, 0.0, 0.0),
        fp(229): Record(1, 22.0, 22.0),
    }
    lib.close()
    assert run_sizes(lib_path) == [160, 40, 10, 10, 10]
    assert stored_records(lib_path) == 230


def test_fingerprints_read_across_a_merge_repeat_but_never_lose_one(lib_path):
    """A caller that writes between the chunks it reads (runs merged meanwhile) gets every
    fingerprint at least once."""
    lib = SQLiteLibrary(lib_path, create=True, stage_limit=10)
    for i in range(3):
        lib.apply(Changes(float(i), inserts=[fp(i * 10 + j) for j in range(10)]))
    seen: list[bytes] = []
    for n, chunk in enumerate(lib.fingerprints(chunk=4)):
        seen += chunk
        if n == 1:  # the fourth run: the first four merged into one, the runs read dropped
            lib.apply(Changes(9.0, inserts=[fp(100 + j) for j in range(10)]))
            assert run_sizes(lib_path) == [40]
    assert set(seen) >= {fp(i) for i in range(30)} | {fp(100 + j) for j in range(10)}
    assert len(seen) > 40, "some repeated"
    lib.close()


def _ten_records_damaged(path: Path, statement: str) -> None:
    """A library of 10 records in two runs, then `statement` run on its file (seal gone)."""
    lib = SQLiteLibrary(path, create=True, stage_limit=5)
    lib.apply(Changes(1.0, inserts=[fp(i) for i in range(10)]))
    lib.close()
    db = sqlite3.connect(path)
    db.execute(statement)
    db.commit()
    db.close()
    Path(str(path) + ".seal").unlink()


def test_verify_counts_each_run_against_its_catalog(lib_path):
    _ten_records_damaged(lib_path, "UPDATE runs SET rows = 9")
    lib = SQLiteLibrary(lib_path, readonly=True)
    with pytest.raises(FormatError, match="run 1 holds 10 records, its catalog says 9"):
        lib.verify()
    lib.close()


def test_a_catalog_naming_a_missing_run_is_refused(lib_path):
    _ten_records_damaged(lib_path, "INSERT INTO runs VALUES (7, 3, x'', x'00')")
    refused(lib_path, "without its run_7")


def test_an_exact_filter_made_before_the_stage_opens_and_answers_the_same(tmp_path):
    """A folder whose library is version 1 (as an older urlseen left it): the exact filter
    opens it, migrates it, and every URL it held is still seen."""
    from urlseen import ExactFilter

    urls = [f"https://old.example/{i}" for i in range(300)]
    with ExactFilter.create(tmp_path / "state", capacity=10_000) as seen:
        assert all(seen.add_many(urls))
    _version_1_file(tmp_path / "state" / "library.sqlite", fill=False)
    with ExactFilter.open(tmp_path / "state") as seen:
        assert seen.add_many([*urls, "https://new.example/"]) == [False] * 300 + [True]
    db = sqlite3.connect(tmp_path / "state" / "library.sqlite")
    assert db.execute("PRAGMA user_version").fetchone() == (3,)
    db.close()
