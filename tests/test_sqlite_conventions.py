"""The SQLite conventions both file stores share (state/sqlite.py): each refuses a missing,
existing, locked, foreign, newer or damaged file with the same error, worded for itself, and
leaves a refused file as it was."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from urlseen.errors import FormatError, StateInUseError
from urlseen.exact import sqlite_library
from urlseen.exact.sqlite_library import SQLiteLibrary
from urlseen.similarity import url_db
from urlseen.similarity.url_db import SQLiteUrlDB

# (opener, noun in messages, what a damaged file is called when opened)
STORES: dict[str, tuple[Callable[..., Any], str, str]] = {
    "library": (SQLiteLibrary, "library", "not a readable urlseen library"),
    "url_db": (SQLiteUrlDB, "URL_DB", "not a readable URL_DB"),
}
VERSIONS = {"library": sqlite_library.SCHEMA_VERSION, "url_db": url_db.SCHEMA_VERSION}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_missing_and_existing_files(store: str, tmp_path: Path) -> None:
    opener, noun, _ = STORES[store]
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(FileNotFoundError, match=re.escape(f"{missing}: no such {noun}")):
        opener(missing)
    assert not missing.exists()
    path = tmp_path / "s.sqlite"
    opener(path, create=True).close()
    with pytest.raises(FileExistsError, match=re.escape(f"{path} exists")):
        opener(path, create=True)
    fresh = tmp_path / "fresh.sqlite"
    with pytest.raises(ValueError, match=re.escape(f"a new {noun} cannot be read-only")):
        opener(fresh, create=True, readonly=True)
    assert not fresh.exists()


def test_one_writer_and_readers_alongside(store: str, tmp_path: Path) -> None:
    opener, _, _ = STORES[store]
    path = tmp_path / "s.sqlite"
    writer = opener(path, create=True)
    try:
        with pytest.raises(
            StateInUseError, match=re.escape(f"{path} is open for writing elsewhere")
        ):
            opener(path)
        opener(path, readonly=True).close()
    finally:
        writer.close()
    opener(path).close()  # the lock went with the writer


def test_a_foreign_sqlite_file_is_refused_untouched(store: str, tmp_path: Path) -> None:
    opener, noun, _ = STORES[store]
    path = tmp_path / "foreign.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    before = _sha(path)
    with pytest.raises(FormatError) as info:
        opener(path)
    assert str(info.value) == f"{path}: a SQLite file, but not a urlseen {noun}"
    assert _sha(path) == before


def test_a_newer_file_is_refused_untouched(store: str, tmp_path: Path) -> None:
    opener, noun, _ = STORES[store]
    path = tmp_path / "s.sqlite"
    opener(path, create=True).close()
    newer = VERSIONS[store] + 1
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={newer}")
    db.commit()
    db.close()
    before = _sha(path)
    with pytest.raises(FormatError) as info:
        opener(path)
    assert str(info.value) == (
        f"{path}: {noun} version {newer} was written by a newer urlseen; "
        f"this one reads up to version {VERSIONS[store]}"
    )
    assert _sha(path) == before


def test_a_damaged_file_is_a_format_error(store: str, tmp_path: Path) -> None:
    opener, _, damaged = STORES[store]
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not a database, just text " * 200)
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(FormatError, match=re.escape(f"{path}: {damaged} (")):
        opener(path)
    assert len(os.listdir("/proc/self/fd")) == fds  # the lock fd and connection were released


def test_new_files_are_marked_and_in_wal_mode(store: str, tmp_path: Path) -> None:
    opener, _, _ = STORES[store]
    path = tmp_path / "s.sqlite"
    with opener(path, create=True):
        db = sqlite3.connect(path)
        try:
            assert db.execute("PRAGMA user_version").fetchone() == (VERSIONS[store],)
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        finally:
            db.close()
