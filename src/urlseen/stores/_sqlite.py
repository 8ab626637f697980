"""The SQLite conventions the file stores share (the fingerprint library and URL_DB).

One writer at a time (an exclusive flock beside SQLite's own locks; readers take none, so
`urlseen info` reads a live crawl's state), WAL with synchronous=NORMAL or FULL, and a file
marked by application_id and user_version: a foreign or newer file is refused, a damaged one
raises FormatError, and neither is written to. Each store names itself (`what`) in the errors.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from urlseen.errors import FormatError, StateInUseError

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


def check_exists(target: Path, *, create: bool, readonly: bool, what: str) -> None:
    """A new file must not exist yet, nor be opened read-only; an existing one must exist."""
    if create and target.exists():
        raise FileExistsError(f"{target} exists")
    if not create and not target.exists():
        raise FileNotFoundError(f"{target}: no such {what}")
    if create and readonly:
        raise ValueError(f"a new {what} cannot be read-only")


def lock(target: Path, *, create: bool, readonly: bool) -> int:
    """Open (or create) the file and, for a writer, take the exclusive lock; returns the fd."""
    fd = os.open(target, os.O_RDONLY | (os.O_CREAT if create else 0), 0o644)
    if not readonly:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateInUseError(f"{target} is open for writing elsewhere") from None
    return fd


def connect(target: Path, *, readonly: bool) -> sqlite3.Connection:
    """Autocommit (transactions are explicit) and usable from the thread that closes it."""
    uri = f"{target.resolve().as_uri()}?mode={'ro' if readonly else 'rw'}"
    return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)


def configure(
    db: sqlite3.Connection, *, readonly: bool, durable: bool, pragmas: Iterable[str] = ()
) -> None:
    """WAL for a writer, synchronous by durability, the store's own pragmas, a busy timeout."""
    if not readonly:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
    for pragma in pragmas:
        db.execute(f"PRAGMA {pragma}")
    db.execute("PRAGMA busy_timeout=10000")


def mark(db: sqlite3.Connection, application_id: int, version: int, schema: str) -> None:
    """Mark a new file as the store's and create its tables (inside the caller's transaction)."""
    db.execute(f"PRAGMA application_id={application_id}")
    db.execute(f"PRAGMA user_version={version}")
    for statement in schema.split(";"):
        if statement.strip():
            db.execute(statement)


def check_mark(
    db: sqlite3.Connection, path: str, application_id: int, version: int, what: str
) -> None:
    """Refuse a file that is not marked as this store's, or was written by a newer urlseen."""
    (app,) = db.execute("PRAGMA application_id").fetchone()
    (found,) = db.execute("PRAGMA user_version").fetchone()
    if app != application_id:
        raise FormatError(f"{path}: a SQLite file, but not a urlseen {what}")
    if found > version:
        raise FormatError(
            f"{path}: {what} version {found} was written by a newer urlseen; "
            f"this one reads up to version {version}"
        )


def close_quietly(db: sqlite3.Connection | None, fd: int) -> None:
    """Release a connection and a lock fd (either may be absent), whatever state they are in."""
    if db is not None:
        with contextlib.suppress(Exception):
            db.close()
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
