"""The SQLite conventions the file stores share (the fingerprint library and URL_DB), and the
one open / lock / check / close skeleton both are built on (`SQLiteStore`).

One writer at a time (an exclusive flock beside SQLite's own locks; readers take none, so
`urlseen info` reads a live crawl's state), WAL with synchronous=NORMAL or FULL while a writer
has it open, and a file marked by application_id and user_version with a `meta(name, value)`
table: a foreign or newer file is refused, a damaged one raises FormatError, and neither is
written to. Each store names itself (`_noun`) in the errors.

Every byte checked: SQLite's own integrity check misses a flipped bit inside a record (a
fingerprint), so a writer's clean close leaves the file in rollback-journal mode (no WAL to
read) and writes a seal beside it (`<file>.seal`: its length and CRC32, state/sealed.py).
Opening a sealed file reads it whole and compares (a reader may skip that: `urlseen info`
without --verify); a writer removes the seal before its first write, so a file whose writer
died has no seal (SQLite's journal keeps it consistent; its bytes are then unchecked) and no
run can seal damage in. Creation is atomic (built under a temporary name, then linked into
place), and an empty SQLite file left by an interrupted creation is recognised
(`remove_half_made`). SQLite's errors reach the caller as FormatError (damage) or OSError
naming the file (disk full, read-only, I/O), never as sqlite3 tracebacks.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import stat
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from urlseen._lifecycle import Closeable
from urlseen.errors import ClosedError, FormatError, ReadOnlyError, StateInUseError
from urlseen.state import sealed as _sealed

_CORRUPTION_WORDS = ("malformed", "not a database", "corrupt", "file is encrypted")
SEAL_SUFFIX = ".seal"
_SIDE_FILES = ("-wal", "-shm", "-journal")
# SQLite's error (its name, else words of its message) -> the errno it means for the caller
_OS_ERRORS = (
    (("SQLITE_FULL", "disk is full"), errno.ENOSPC),
    (("SQLITE_READONLY", "readonly database"), errno.EROFS),
    (("SQLITE_IOERR", "disk i/o error"), errno.EIO),
    (("SQLITE_CANTOPEN", "unable to open"), errno.EACCES),
    (("SQLITE_PERM", "access permission denied"), errno.EACCES),
)


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """SQLite's way of saying the file is damaged or not a database at all."""
    text = str(exc).lower()
    return any(w in text for w in _CORRUPTION_WORDS)


def os_error(exc: sqlite3.Error, path: str) -> OSError | None:
    """The OSError naming path that a SQLite error of the file system means (disk full,
    read-only, I/O, cannot open), or None for another error."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    text = str(exc).lower()
    for (code, words), number in _OS_ERRORS:
        if name.startswith(code) or words in text:
            return OSError(number, f"{os.strerror(number)} (SQLite: {exc})", path)
    return None


@contextlib.contextmanager
def corruption_as(
    error: Callable[[sqlite3.DatabaseError], FormatError], path: str | None = None
) -> Iterator[None]:
    """Raise `error(exc)` for a damaged file and, given the file's path, an OSError naming it
    for a file-system error; other database errors pass unchanged."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            raise error(exc) from exc
        translated = None if path is None else os_error(exc, path)
        if translated is not None:
            raise translated from exc
        raise


def seal_of(path: str | os.PathLike[str]) -> Path:
    """Where a SQLite store's seal lives: beside it, named after it."""
    return Path(f"{os.fspath(path)}{SEAL_SUFFIX}")


def _file_crc(fd: int) -> tuple[int, int]:
    """(length, CRC32) of a whole file, read in 4 MiB pieces."""
    crc, offset = 0, 0
    while piece := os.pread(fd, 4 << 20, offset):
        crc = zlib.crc32(piece, crc)
        offset += len(piece)
    return offset, crc


class SQLiteStore(Closeable):
    """A store in one SQLite file: opened (or created) under the conventions above, checked
    before anything is written, closed with a WAL checkpoint and sealed.

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
        check_seal: bool = True,
    ) -> None:
        """Open the file, or create it with `new_meta` as its first meta rows (and
        `page_size`); `pragmas` are the store's own settings. A sealed file is read whole and
        checked against its seal (FormatError if it differs); a reader may skip that with
        check_seal=False, a writer never does."""
        self.path = str(path)
        self.readonly = readonly
        self.seal_on_close = True  # False for a store that is thrown away (a temporary one)
        self.sealed = False  # True once the file was checked against its seal
        self._wrote = False  # a writer's first write removes the seal (`_writing`)
        self._connection: sqlite3.Connection | None = None
        self._lock_fd = -1
        target = Path(path)
        self._check_exists(target, create)
        try:
            if create:
                self._lock_fd = self._build(target, new_meta, page_size)
            else:
                self._lock_fd = self._lock(target)
            uri = f"{target.resolve().as_uri()}?mode={'ro' if readonly else 'rw'}"
            # Autocommit (transactions are explicit), usable from the thread that closes it.
            self._connection = sqlite3.connect(
                uri, uri=True, isolation_level=None, check_same_thread=False
            )
            self._check()  # first: a refused file must be left exactly as it was
            if not create and (check_seal or not readonly):  # SQLite's checks say more
                self.sealed = self._check_seal(target)
            self._configure(durable, pragmas)
            if create:  # a new file is written from the start
                self._writing()
        except BaseException as exc:
            self._close_quietly()
            self._closed = True
            if isinstance(exc, sqlite3.DatabaseError):
                if is_corruption(exc):
                    raise FormatError(f"{self.path}: {self._unreadable} ({exc})") from exc
                translated = os_error(exc, self.path)
                if translated is not None:
                    raise translated from exc
            raise

    def _build(self, target: Path, meta: Mapping[str, str], page_size: int | None) -> int:
        """Make the file under a temporary name, complete (marked, tables, meta rows), then
        link it into place: a killed creation leaves no half-made store at `target`. Returns
        the locked fd (the lock is the inode's: it holds at the new name too)."""
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                if page_size is not None:  # before the file has a page
                    db.execute(f"PRAGMA page_size={int(page_size)}")
                # no sync of its own: the file is one fsync below, before it takes its name;
                # WAL already (its checkpoint at close lands in the file), so that the first
                # write does not switch journals with three syncs
                db.execute("PRAGMA synchronous=OFF")
                db.execute("PRAGMA journal_mode=WAL")
                self._create(db, meta)
            finally:
                db.close()
            os.fsync(fd)
            try:
                os.link(tmp, target)  # fails if target exists: never clobber a store
            except FileExistsError:
                raise FileExistsError(errno.EEXIST, "exists already", str(target)) from None
            _sealed.sync_folder(target)
        except BaseException:
            os.close(fd)
            raise
        finally:
            for leftover in ("", *_SIDE_FILES):
                Path(f"{tmp}{leftover}").unlink(missing_ok=True)
        return fd

    def _check_exists(self, target: Path, create: bool) -> None:
        """A new file must not exist yet, nor be opened read-only; an existing one must exist."""
        if create and target.exists():
            raise FileExistsError(f"{target} exists")
        if not create and not target.exists():
            raise FileNotFoundError(f"{target}: no such {self._noun}")
        if create and self.readonly:
            raise ValueError(f"a new {self._noun} cannot be read-only")

    def _lock(self, target: Path) -> int:
        """Open the file (a regular one: a FIFO is refused, not waited on) and, for a writer,
        take the exclusive lock; the fd."""
        # A writer's fd is opened for writing: a read-only file or file system is refused
        # here, naming the file, before SQLite meets it.
        fd = os.open(target, (os.O_RDONLY if self.readonly else os.O_RDWR) | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FormatError(f"{target}: not a regular file, so not a {self._noun}")
            if not self.readonly:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise StateInUseError(f"{target} is open for writing elsewhere") from None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_seal(self, target: Path) -> bool:
        """Compare the file with its seal: True if they agree, False if there is none (its
        writer did not close it) or, for a reader, a writer changed it meanwhile; FormatError
        if they differ."""
        seal = seal_of(target)
        try:
            raw = seal.read_bytes()
        except FileNotFoundError:
            return False
        body = _sealed.decode(raw, str(seal), "seal")
        before = os.fstat(self._lock_fd)
        length, crc = _file_crc(self._lock_fd)
        if (length, crc) == (body.get("bytes"), body.get("crc32")):
            return True
        if not self.readonly:  # the lock keeps every other writer out: this is damage
            self._damaged_against_seal(length, body)
        with contextlib.suppress(OSError):  # a reader holds no lock: changed, or damaged?
            after = os.fstat(self._lock_fd)
            moved = (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns)
            if moved or seal.read_bytes() != raw:
                return False
        self._damaged_against_seal(length, body)
        return False  # not reached

    def _damaged_against_seal(self, length: int, body: Mapping[str, object]) -> None:
        what = (
            f"{length} bytes, its seal says {body.get('bytes')}"
            if length != body.get("bytes")
            else "checksum mismatch with its seal"
        )
        raise FormatError(
            f"{self.path}: corrupted {self._noun} ({what}): restore it from a copy, or delete "
            "it to start afresh"
        )

    @classmethod
    def half_made(cls, path: str | os.PathLike[str]) -> bool:
        """Whether path is an empty SQLite file (no mark, no tables), as an interrupted
        creation may leave it: safe to make again. False for anything else."""
        target = Path(path)
        try:
            if not target.is_file() or target.stat().st_size == 0:
                return target.is_file()
            db = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)
            try:
                (app,) = db.execute("PRAGMA application_id").fetchone()
                (tables,) = db.execute("SELECT count(*) FROM sqlite_schema").fetchone()
            finally:
                db.close()
        except (OSError, sqlite3.Error):
            return False
        return bool(app == 0 and tables == 0)

    @classmethod
    def remove_half_made(cls, path: str | os.PathLike[str]) -> bool:
        """Remove a half-made store at path (and SQLite's files beside it) unless a process
        holds it; True if it was removed."""
        target = Path(path)
        if not cls.half_made(target):
            return False
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not cls.half_made(target):
                return False
            for suffix in _SIDE_FILES:
                Path(f"{target}{suffix}").unlink(missing_ok=True)
            target.unlink()
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        _sealed.sync_folder(target)
        return True

    def _configure(self, durable: bool, pragmas: Sequence[str]) -> None:
        """Synchronous by durability, the store's pragmas, a busy timeout (a writer switches
        to WAL at its first write: `_writing`)."""
        db = self._db
        db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        for pragma in pragmas:
            db.execute(f"PRAGMA {pragma}")
        db.execute("PRAGMA busy_timeout=10000")

    def _create(self, db: sqlite3.Connection, meta: Mapping[str, str]) -> None:
        """Mark the new file as this store's, create its tables and first meta rows."""
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
            if app == 0 and not db.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]:
                raise FormatError(
                    f"{self.path}: an empty SQLite file, left by an interrupted creation: "
                    f"create the {what} again (delete it, or let `urlseen dedup` do it)"
                )
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

    def _writing(self) -> None:
        """Before a writer's first write: the seal goes (the file is about to change; a writer
        that never writes leaves the file, seal and all, as it found it), and WAL comes."""
        if self._wrote:
            return
        if self.readonly:
            raise ReadOnlyError(f"{self.path} was opened read-only")
        with self._errors():
            _unlink_durably(seal_of(self.path))
            self._db.execute("PRAGMA journal_mode=WAL")
        self._wrote = True

    @property
    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            raise self._closed_error()
        return self._connection

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"{self.path}: the {self._noun} is closed")

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Raise FormatError for a damaged file, OSError naming it for a file-system error
        (disk full, read-only); other database errors pass unchanged."""
        return corruption_as(
            lambda exc: FormatError(f"{self.path}: {self._damaged} ({exc})"), self.path
        )

    def _close(self) -> None:
        """A writer checkpoints the WAL into the file and leaves it in rollback-journal mode
        (nothing beside it to read), then seals it; then the file and the lock go. A file that
        cannot be brought there (disk full, a reader in the way) stays unsealed: the next open
        trusts SQLite's journal, and says nothing it cannot check."""
        db = self._connection
        try:
            if db is not None and self._wrote:
                settled = False
                with contextlib.suppress(sqlite3.Error):
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    (mode,) = db.execute("PRAGMA journal_mode=DELETE").fetchone()
                    settled = mode == "delete"
                self._connection = None
                db.close()
                if settled and self.seal_on_close:
                    length, crc = _file_crc(self._lock_fd)
                    body = {"file": Path(self.path).name, "bytes": length, "crc32": crc}
                    _sealed.write(seal_of(self.path), body)
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


def _unlink_durably(path: Path) -> None:
    """Remove path if it exists, the removal on disk before anything else is written."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    _sealed.sync_folder(path)


def to_millis(timestamp: float) -> int:
    """A time as the SQLite states keep it: whole milliseconds since the epoch."""
    return round(timestamp * 1000)


def from_millis(millis: int) -> float:
    """A time kept as whole milliseconds, back in seconds since the epoch."""
    return millis / 1000
