"""The SQLite conventions the file stores share (the fingerprint library and URL_DB), and the
one open / lock / check / close skeleton both are built on (`SQLiteStore`).

One writer at a time (an exclusive flock beside SQLite's own locks; readers take none, so
`urlseen info` reads a live crawl's state), WAL with synchronous=NORMAL or FULL, and a file
marked by application_id and user_version with a `meta(name, value)` table: a foreign or newer
file is refused, a damaged one raises FormatError, and neither is written to. Each store names
itself (`_noun`) in the errors.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from urlseen._lifecycle import Closeable
from urlseen.errors import ClosedError, FormatError, StateInUseError

_CORRUPTION_WORDS = ("malformed", "not a database", "corrupt", "file is encrypted")


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """SQLite's way of saying the file is damaged or not a database at all."""
    text = str(exc).lower()
    return any(w in text for w in _CORRUPTION_WORDS)


@contextlib.contextmanager
def corruption_as(error: Callable[[sqlite3.DatabaseError], FormatError]) -> Iterator[None]:
    """Raise `error(exc)` for a damaged file; other database errors pass unchanged."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            raise error(exc) from exc
        raise


class SQLiteStore(Closeable):
    """A store in one SQLite file: opened (or created) under the conventions above, checked
    before anything is written, closed with a WAL checkpoint.

    A subclass names its mark (APPLICATION_ID, SCHEMA_VERSION), its tables (SCHEMA, with a
    `meta(name, value)` table), how errors call a file that SQLite finds damaged when it is
    opened (`_unreadable`) and later (`_damaged`), and checks its own tables (`_check_tables`).
    """

    APPLICATION_ID: ClassVar[int]
    SCHEMA_VERSION: ClassVar[int]
    SCHEMA: ClassVar[str]
    _unreadable: ClassVar[str]  # "{path}: {_unreadable} ({sqlite's error})" when opening
    _damaged: ClassVar[str]  # the same, once open

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool,
        readonly: bool,
        durable: bool,
        new_meta: Mapping[str, str],
        pragmas: Sequence[str] = (),
        page_size: int | None = None,
    ) -> None:
        """Open the file, or create it with `new_meta` as its first meta rows (and
        `page_size`); `pragmas` are the store's own settings."""
        self.path = str(path)
        self.readonly = readonly
        self._connection: sqlite3.Connection | None = None
        self._lock_fd = -1
        target = Path(path)
        self._check_exists(target, create)
        self._lock_fd = self._lock(target, create)
        try:
            uri = f"{target.resolve().as_uri()}?mode={'ro' if readonly else 'rw'}"
            # Autocommit (transactions are explicit), usable from the thread that closes it.
            self._connection = sqlite3.connect(
                uri, uri=True, isolation_level=None, check_same_thread=False
            )
            if create:  # before WAL mode: the page size is fixed once the file has a page
                if page_size is not None:
                    self._db.execute(f"PRAGMA page_size={int(page_size)}")
                self._configure(durable, pragmas)
                self._create(new_meta)
                self._check()
            else:  # check first: a refused file must be left exactly as it was
                self._check()
                self._configure(durable, pragmas)
        except BaseException as exc:
            self._close_quietly()
            self._closed = True
            if isinstance(exc, sqlite3.DatabaseError) and is_corruption(exc):
                raise FormatError(f"{self.path}: {self._unreadable} ({exc})") from exc
            raise

    def _check_exists(self, target: Path, create: bool) -> None:
        """A new file must not exist yet, nor be opened read-only; an existing one must exist."""
        if create and target.exists():
            raise FileExistsError(f"{target} exists")
        if not create and not target.exists():
            raise FileNotFoundError(f"{target}: no such {self._noun}")
        if create and self.readonly:
            raise ValueError(f"a new {self._noun} cannot be read-only")

    def _lock(self, target: Path, create: bool) -> int:
        """Open (or create) the file and, for a writer, take the exclusive lock; the fd."""
        fd = os.open(target, os.O_RDONLY | (os.O_CREAT if create else 0), 0o644)
        if not self.readonly:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StateInUseError(f"{target} is open for writing elsewhere") from None
        return fd

    def _configure(self, durable: bool, pragmas: Sequence[str]) -> None:
        """WAL for a writer, synchronous by durability, the store's pragmas, a busy timeout."""
        db = self._db
        if not self.readonly:
            db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        for pragma in pragmas:
            db.execute(f"PRAGMA {pragma}")
        db.execute("PRAGMA busy_timeout=10000")

    def _create(self, meta: Mapping[str, str]) -> None:
        """Mark the new file as this store's, create its tables and first meta rows."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        db.execute(f"PRAGMA application_id={self.APPLICATION_ID}")
        db.execute(f"PRAGMA user_version={self.SCHEMA_VERSION}")
        for statement in self.SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        db.execute("COMMIT")

    def _check(self) -> None:
        """Refuse a file not marked as this store's, written by a newer urlseen, or without
        the store's tables."""
        db, what = self._db, self._noun
        (app,) = db.execute("PRAGMA application_id").fetchone()
        (found,) = db.execute("PRAGMA user_version").fetchone()
        if app != self.APPLICATION_ID:
            raise FormatError(f"{self.path}: a SQLite file, but not a urlseen {what}")
        if found > self.SCHEMA_VERSION:
            raise FormatError(
                f"{self.path}: {what} version {found} was written by a newer urlseen; "
                f"this one reads up to version {self.SCHEMA_VERSION}"
            )
        self._check_tables()

    def _check_tables(self) -> None:
        """FormatError unless the store's tables and meta rows are there."""
        raise NotImplementedError

    @property
    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            raise self._closed_error()
        return self._connection

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"{self.path}: the {self._noun} is closed")

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Raise FormatError for a damaged file; other database errors pass unchanged."""
        return corruption_as(lambda exc: FormatError(f"{self.path}: {self._damaged} ({exc})"))

    def _close(self) -> None:
        """A writer checkpoints the WAL into the file; then the file and the lock go."""
        db = self._connection
        try:
            if db is not None and not self.readonly:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self._close_quietly()

    def _close_quietly(self) -> None:
        """Release the connection and the lock fd, whatever state they are in, each exactly
        once (no checkpoint: also the way out of a failed open)."""
        db, self._connection = self._connection, None
        fd, self._lock_fd = self._lock_fd, -1
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
