"""URL_DB: the similarity filter's record of its decisions, in a SQLite file.

The patent stores every NEW URL in URL_DB. Here URL_DB is an audit log: one row per decision
(the URL, its feature values, new or similar, which features were already present, when), so
that what a lossy filter dropped can be looked up and questioned afterwards.

Why not the fingerprint library (exact/library_protocol.py): that store keeps one row per distinct
16-byte fingerprint with reference counts and expiry, the source of truth of an exact filter.
An audit log keeps the text and the reasons, one row per decision, append-only, and nothing
is ever looked up in it on the hot path. The two share the SQLite conventions:

- WAL journal, synchronous=NORMAL (durable=True: FULL); one transaction per batch of decisions.
- PRAGMA application_id 0x75726C64 ("urld") and user_version mark the file: a foreign SQLite
  file, a newer version or a damaged file is refused with FormatError, and left untouched.
- One writer at a time (an flock beside SQLite's own locks); readers take none.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

from urlseen.errors import FormatError, ReadOnlyError
from urlseen.state import sqlite
from urlseen.state.sqlite import from_millis, to_millis

APPLICATION_ID = 0x75726C64  # "urld"
SCHEMA_VERSION = 1
FORMAT_NAME = "urlseen-url-db"

_SCHEMA = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE decisions (
    seq INTEGER PRIMARY KEY,
    url NOT NULL,
    features TEXT NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('new', 'similar')),
    matched TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE INDEX decisions_by_url ON decisions (url);
"""


class Decision(NamedTuple):
    """One decision of a similarity filter.

    Attributes:
        url: the key as given (str, or bytes for lines that are not UTF-8).
        features: feature name -> value (depth as decimal text).
        new: True if the URL was NEW (kept), False if SIMILAR (dropped).
        matched: the features whose bits were already set (all of them when dropped).
        at: Unix seconds (stored with millisecond resolution).
    """

    url: str | bytes
    features: dict[str, str]
    new: bool
    matched: tuple[str, ...]
    at: float


class UrlDB(Protocol):
    """Where a similarity filter writes its decisions: append a batch, read them back."""

    def record(self, decisions: Sequence[Decision]) -> None: ...

    def decisions(
        self, *, url: str | bytes | None = None, new: bool | None = None
    ) -> Iterator[Decision]: ...

    def count(self, *, new: bool | None = None) -> int: ...

    def close(self) -> None: ...


class SQLiteUrlDB(sqlite.SQLiteStore):
    """URL_DB in a SQLite file (see the module docstring).

    Args:
        path: the file.
        create: make a new file (FileExistsError if it exists); else open an existing one.
        readonly: open for reading only (no lock; a live filter may be writing).
        durable: every batch on disk before record() returns (synchronous=FULL).

    Raises:
        FormatError: the file is not a URL_DB, is damaged, or was written by a newer urlseen.
        StateInUseError: another process has it open for writing.
    """

    _noun = "URL_DB"
    APPLICATION_ID = APPLICATION_ID
    SCHEMA_VERSION = SCHEMA_VERSION
    SCHEMA = _SCHEMA
    _unreadable = "not a readable URL_DB"
    _damaged = "damaged URL_DB"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        readonly: bool = False,
        durable: bool = False,
    ) -> None:
        super().__init__(
            path,
            create=create,
            readonly=readonly,
            durable=durable,
            new_meta={"format": FORMAT_NAME},
        )

    def _check_tables(self) -> None:
        db = self._db
        try:
            row = db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
            db.execute("SELECT seq, url, features, decision, matched, at_ms FROM decisions LIMIT 0")
        except sqlite3.OperationalError as exc:  # no such table / column
            raise FormatError(f"{self.path}: marked as a URL_DB but lacks its tables") from exc
        if row is None or row[0] != FORMAT_NAME:
            raise FormatError(f"{self.path}: a URL_DB without its metadata")

    def record(self, decisions: Sequence[Decision]) -> None:
        """Append a batch of decisions in one transaction (all or nothing)."""
        if self.readonly:
            raise ReadOnlyError(f"{self.path}: the URL_DB is open read-only")
        if not decisions:
            return
        rows = [
            (
                d.url,
                json.dumps(d.features, ensure_ascii=False),
                "new" if d.new else "similar",
                ",".join(d.matched),
                to_millis(d.at),
            )
            for d in decisions
        ]
        db = self._db
        self._writing()
        with self._errors():
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    "INSERT INTO decisions (url, features, decision, matched, at_ms) "
                    "VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def decisions(
        self, *, url: str | bytes | None = None, new: bool | None = None
    ) -> Iterator[Decision]:
        """The recorded decisions in the order they were made, optionally for one URL or kind."""
        where, args = [], []
        if url is not None:
            where.append("url = ?")
            args.append(url)
        if new is not None:
            where.append("decision = ?")
            args.append("new" if new else "similar")
        sql = "SELECT url, features, decision, matched, at_ms FROM decisions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq"
        with self._errors():
            for u, features, decision, matched, at_ms in self._db.execute(sql, args):
                yield Decision(
                    u,
                    json.loads(features),
                    decision == "new",
                    tuple(matched.split(",")) if matched else (),
                    from_millis(at_ms),
                )

    def count(self, *, new: bool | None = None) -> int:
        """How many decisions are recorded (all, or only NEW / only SIMILAR ones)."""
        with self._errors():
            if new is None:
                row = self._db.execute("SELECT count(*) FROM decisions").fetchone()
            else:
                row = self._db.execute(
                    "SELECT count(*) FROM decisions WHERE decision = ?",
                    ("new" if new else "similar",),
                ).fetchone()
        return int(row[0])
