"""SQLiteFrontier: a crawl's frontier in one SQLite file of its state folder (Scrapy's JOBDIR).

One table holds every request not done: its priority, whether it is in flight, and the
request serialized by the caller. A commit (new requests in, done requests out) is one
transaction; the write-ahead log makes it durable against a killed process when COMMIT returns
(and against an OS crash with durable=True, at an fsync per commit). Taking a request only
marks it in flight: that mark need not survive a kill, because every request still in the
table when the frontier opens goes back to the queue.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from urlseen.errors import FormatError
from urlseen.frontier import Entry, Token

FRONTIER_FILE = "frontier.sqlite"
APPLICATION_ID = 0x55534652  # "USFR": the file is urlseen's frontier
FORMAT_VERSION = 1


class SQLiteFrontier:
    """A local frontier, in a file (path) or in memory (path None).

    Args:
        path: the SQLite file (created if missing), or a folder to keep frontier.sqlite in.
        lifo: within one priority, take the newest request first (Scrapy's default order,
            depth-first); else the oldest (breadth-first).
        durable: every commit reaches the disk before commit() returns (synchronous=FULL).
    """

    def __init__(
        self, path: str | os.PathLike[str] | None, *, lifo: bool = True, durable: bool = False
    ) -> None:
        if path is not None and Path(path).is_dir():
            path = Path(path, FRONTIER_FILE)
        self.path = None if path is None else Path(path)
        self.lifo = lifo
        self._db = sqlite3.connect(
            ":memory:" if path is None else os.fspath(path),
            isolation_level=None,  # transactions are explicit
            check_same_thread=False,
        )
        try:
            self._setup(durable)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise FormatError(f"{self.path}: not a urlseen frontier ({exc})") from None
        order = "DESC" if lifo else "ASC"
        self._next = (
            f"SELECT id, request FROM requests WHERE taken = 0 "
            f"ORDER BY priority DESC, id {order} LIMIT 1"
        )
        self._db.execute(
            f"CREATE INDEX IF NOT EXISTS ready_{order.lower()} "
            f"ON requests(taken, priority DESC, id {order})"
        )
        self.returned = self._db.execute("UPDATE requests SET taken = 0 WHERE taken = 1").rowcount
        self._ready = self._count("WHERE taken = 0")
        self._pending = self._count("")

    def _setup(self, durable: bool) -> None:
        db = self._db
        app = db.execute("PRAGMA application_id").fetchone()[0]
        tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables and app != APPLICATION_ID:
            raise sqlite3.DatabaseError("another application's database")
        if app == APPLICATION_ID:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version != FORMAT_VERSION:
                raise sqlite3.DatabaseError(f"format version {version}, expected {FORMAT_VERSION}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "priority INTEGER NOT NULL, taken INTEGER NOT NULL DEFAULT 0, request BLOB NOT NULL)"
        )
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
        db.execute("COMMIT")

    def _count(self, where: str) -> int:
        return int(self._db.execute(f"SELECT count(*) FROM requests {where}").fetchone()[0])

    def commit(self, entries: Sequence[Entry], done: Sequence[Token]) -> None:
        """Queue the entries and drop the done requests: one transaction, durable on return."""
        if not entries and not done:
            return
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO requests (priority, request) VALUES (?, ?)", entries)
            dropped = 0
            for token in done:
                dropped += db.execute("DELETE FROM requests WHERE id = ?", (token,)).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._ready += len(entries)
        self._pending += len(entries) - dropped

    def take(self) -> tuple[Token, bytes] | None:
        row = self._db.execute(self._next).fetchone()
        if row is None:
            return None
        self._db.execute("UPDATE requests SET taken = 1 WHERE id = ?", (row[0],))
        self._ready -= 1
        return int(row[0]), bytes(row[1])

    def ready(self) -> int:
        return self._ready

    def pending(self) -> int:
        return self._pending

    def renew(self) -> None:
        """Nothing to renew: one process owns a local frontier."""

    def release(self) -> None:
        """Nothing to do now: in-flight requests go back to the queue when it opens again."""

    def clear(self) -> None:
        self._db.execute("DELETE FROM requests")
        self._ready = self._pending = 0

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SQLiteFrontier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
