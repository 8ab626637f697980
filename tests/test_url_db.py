"""URL_DB (similarity/url_db.py): decisions round-trip in order, batches are all or nothing, and
foreign, damaged or newer files are refused with FormatError and left untouched."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from urlseen.errors import ClosedError, FormatError, ReadOnlyError, StateInUseError
from urlseen.similarity.url_db import APPLICATION_ID, Decision, SQLiteUrlDB


def _decisions() -> list[Decision]:
    return [
        Decision("http://x.com/a", {"site": "http://x.com", "depth": "2"}, True, (), 1.5),
        Decision(
            "http://x.com/b", {"site": "http://x.com", "depth": "2"}, False, ("site", "depth"), 2.25
        ),
        Decision(b"\xff\xfe", {"site": "\x00bytes:\xff\xfe"}, True, ("depth",), 3.0),
        Decision("http://ü.com/", {"site": "http://xn--tda.com"}, True, (), 4.0),
    ]


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with SQLiteUrlDB(path, create=True) as db:
        db.record(_decisions()[:2])
        db.record(_decisions()[2:])
        db.record([])
    with SQLiteUrlDB(path, readonly=True) as db:
        assert list(db.decisions()) == _decisions()
        assert (db.count(), db.count(new=True), db.count(new=False)) == (4, 3, 1)
        assert [d.url for d in db.decisions(new=False)] == ["http://x.com/b"]
        assert list(db.decisions(url=b"\xff\xfe")) == [_decisions()[2]]
        with pytest.raises(ReadOnlyError):
            db.record(_decisions())


def test_one_writer_at_a_time_and_readers_alongside(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with SQLiteUrlDB(path, create=True) as db:
        with pytest.raises(StateInUseError):
            SQLiteUrlDB(path)
        db.record(_decisions())
        with SQLiteUrlDB(path, readonly=True) as reader:
            assert reader.count() == 4
    with pytest.raises(FileExistsError):
        SQLiteUrlDB(path, create=True)
    with pytest.raises(FileNotFoundError):
        SQLiteUrlDB(tmp_path / "missing.sqlite")


def test_a_failed_batch_writes_nothing(tmp_path: Path) -> None:
    with SQLiteUrlDB(tmp_path / "db.sqlite", create=True) as db:
        bad = [*_decisions(), Decision(object(), {}, True, (), 0.0)]  # type: ignore[arg-type]
        with pytest.raises(sqlite3.Error):
            db.record(bad)
        assert db.count() == 0
        db.record(_decisions())
        assert db.count() == 4


def test_closed(tmp_path: Path) -> None:
    db = SQLiteUrlDB(tmp_path / "db.sqlite", create=True)
    db.close()
    db.close()
    assert db.closed
    with pytest.raises(ClosedError):
        db.count()


def _sqlite(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("statements", "message"),
    [
        (["CREATE TABLE t (x)"], "not a urlseen URL_DB"),
        ([f"PRAGMA application_id={APPLICATION_ID}", "CREATE TABLE t (x)"], "lacks its tables"),
        ([f"PRAGMA application_id={APPLICATION_ID}", "PRAGMA user_version=2"], "newer urlseen"),
        (["PRAGMA application_id=1937011315"], "not a urlseen URL_DB"),  # the library's mark
    ],
)
def test_foreign_files_are_refused_untouched(
    tmp_path: Path, statements: list[str], message: str
) -> None:
    path = tmp_path / "other.sqlite"
    _sqlite(path, *statements)
    before = path.read_bytes()
    with pytest.raises(FormatError, match=message):
        SQLiteUrlDB(path)
    assert path.read_bytes() == before
    assert not (tmp_path / "other.sqlite-wal").exists()


def test_garbage_and_truncated_files_are_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all" * 300)
    with pytest.raises(FormatError):
        SQLiteUrlDB(garbage)
    good = tmp_path / "good.sqlite"
    with SQLiteUrlDB(good, create=True) as db:
        db.record(_decisions() * 200)
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(FormatError):
        SQLiteUrlDB(truncated)
