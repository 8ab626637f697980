"""The dedup job's streams: lines (or byte chunks, for the C line engine) in from files, gzip
files or stdin; the output file, resumed
without the partial last line a killed run may have left; and the checks that keep a careless
command line from destroying its own input.

What each odd input does:
- gzip data is decompressed wherever it comes from (a file of any name, stdin, a FIFO): it is
  recognised by its magic bytes, not by a .gz suffix; a .gz file holding plain text is read
  as text. Lines are inflated by gzip.GzipFile, chunks by zlib directly (job/inflate.py: less CPU,
  the same bytes and errors).
- A gzip stream that is cut short or damaged stops the run at that input: InputError names
  the file and says what is wrong; the lines read before were processed. (gzip checks its CRC
  only at the end of a stream, so a damaged middle is found there, after its lines.)
- FIFOs and process substitution (`<(zcat a.gz)`) are read like files.
- An output (or state) that is also an input is refused before anything is opened
  (`refuse_clobbering`): `urlseen dedup a.txt -o a.txt` would empty a.txt before reading it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator

from urlseen.errors import InputError
from urlseen.job.inflate import GZIP_MAGIC, inflated

TYPE_CHECKING = False  # typing (and gzip, until an input holds gzip data) stay off the start
if TYPE_CHECKING:
    from typing import Any, BinaryIO, Protocol, TextIO, TypeVar

    class _Closable(Protocol):
        def close(self) -> None: ...

    class _Reader(Protocol):
        error: InputError | None
        _stop: bool

    Opened = TypeVar("Opened", bound=_Closable)
    Item = TypeVar("Item")

_READ_ERRORS = (OSError, EOFError, zlib.error)


def _label(name: str) -> str:
    return "stdin" if name == "-" else name


class _Prefixed(io.RawIOBase):
    """A stream with bytes already read from it put back in front (after a sniff), closed with
    it if owned."""

    def __init__(self, head: bytes, rest: BinaryIO, owned: bool) -> None:
        self._head = head
        self._rest = rest
        self._owned = owned

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        try:
            if self._owned:
                self._rest.close()
        finally:
            super().close()

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _sniff(stream: BinaryIO, owned: bool) -> tuple[BinaryIO, bool]:
    """The stream, and whether it starts with gzip's magic bytes (read without losing them:
    peeked, or read and put back in front for a pipe that cannot peek)."""
    peek = getattr(stream, "peek", None)
    head = peek(2)[:2] if peek is not None else b""
    if len(head) < 2:  # no peek, or a pipe that has given less so far
        head = stream.read(2)
        stream = io.BufferedReader(_Prefixed(head, stream, owned), 1 << 16)
    return stream, head == GZIP_MAGIC


def _sniffed(stream: BinaryIO, owned: bool) -> BinaryIO:
    """The stream, decompressed if it starts with gzip's magic bytes."""
    stream, packed = _sniff(stream, owned)
    if not packed:
        return stream
    import gzip  # here: plain input never needs it

    class _OwnGzip(gzip.GzipFile):
        """A GzipFile that closes the file it reads (GzipFile leaves a file object it was
        given open)."""

        def close(self) -> None:
            try:
                super().close()
            finally:
                stream.close()

    reader = _OwnGzip if owned else gzip.GzipFile
    return reader(fileobj=stream, mode="rb")  # type: ignore[return-value]


def _stdin() -> BinaryIO:
    """Standard input through a reader of our own on its descriptor, not sys.stdin.buffer: the
    read-ahead thread may be blocked in a read when the run ends (Ctrl-C on a silent pipe), and
    the interpreter's shutdown would then abort on sys.stdin's held lock."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object without a descriptor
        return sys.stdin.buffer
    return open(fd, "rb", closefd=False)  # never closes the descriptor


def open_input(name: str) -> BinaryIO:
    """A file, a FIFO or "-" for stdin; gzip data is decompressed (recognised by its magic
    bytes). Closing what it returns for "-" would close stdin: do not."""
    return _open(name, _sniffed)


class Packed:
    """An input holding gzip data, not inflated yet (the chunk path inflates it with zlib)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw

    def close(self) -> None:
        self.raw.close()


def _packed(stream: BinaryIO, owned: bool) -> BinaryIO | Packed:
    stream, packed = _sniff(stream, owned)
    return Packed(stream) if packed else stream


def _open(name: str, sniffed: Callable[[BinaryIO, bool], Opened]) -> Opened:
    """Input `name` ("-": stdin, never closed by what is returned) through sniffed(stream,
    owned)."""
    if name == "-":
        return sniffed(_stdin(), False)
    raw = open(name, "rb")  # noqa: SIM115 (returned to the caller, who closes it)
    try:
        return sniffed(raw, True)
    except BaseException:
        raw.close()
        raise


@contextlib.contextmanager
def read_errors(name: str) -> Iterator[None]:
    """Errors met while reading input `name` become one InputError naming it (a truncated or
    damaged gzip stream, an unreadable file)."""
    try:
        yield
    except InputError:
        raise
    except EOFError:
        raise InputError(
            errno.EIO,
            "cut short: the gzip data ends before its end-of-stream marker; the lines before "
            "the cut were read",
            _label(name),
        ) from None
    except (zlib.error, OSError) as exc:
        gzip = sys.modules.get("gzip")  # imported by whatever read gzip data
        if isinstance(exc, zlib.error) or (gzip is not None and isinstance(exc, gzip.BadGzipFile)):
            raise InputError(
                errno.EIO, f"damaged gzip data ({exc}); the lines before it were read", _label(name)
            ) from None
        assert isinstance(exc, OSError)
        if exc.errno == errno.EPIPE or isinstance(exc, BrokenPipeError):
            raise
        raise InputError(
            exc.errno or errno.EIO, exc.strerror or str(exc), exc.filename or _label(name)
        ) from None


class InputLines(Iterator[bytes]):
    """The lines of every input in turn (stdin when there is none), newlines kept.

    An input that cannot be read to its end raises InputError naming it; with
    stop_on_error=True the lines simply end there and the error waits in `error`, so that the
    caller can first report what was done with the lines before it.
    """

    def __init__(self, names: Iterable[str], stop_on_error: bool = False) -> None:
        self.error: InputError | None = None
        self._stop = stop_on_error
        self._lines = self._read(tuple(names) or ("-",))

    def __iter__(self) -> InputLines:
        return self

    def __next__(self) -> bytes:
        return next(self._lines)

    def _read(self, names: tuple[str, ...]) -> Iterator[bytes]:
        return _each_input(self, names, iter, open_input)


def _each_input(
    reader: _Reader,
    names: tuple[str, ...],
    read: Callable[[Opened], Iterator[Item]],
    opener: Callable[[str], Opened],
) -> Iterator[Item]:
    """read(opener(name)) of every input in turn, each opened and closed here (stdin is not
    closed); an input that cannot be read to its end raises InputError naming it, or, when the
    reader stops on errors, ends the items there with the error kept in reader.error."""
    for name in names:
        try:
            with read_errors(name):
                stream = opener(name)
                try:
                    yield from read(stream)
                finally:
                    if name != "-":
                        stream.close()
        except InputError as exc:
            if not reader._stop:
                raise
            reader.error = exc
            return


def input_lines(names: tuple[str, ...], *, stop_on_error: bool = False) -> InputLines:
    """The lines of every input in turn (stdin when there is none), newlines kept (see
    InputLines for errors)."""
    return InputLines(names, stop_on_error)


CHUNK_SIZE = 1 << 20


class Inputs:
    """The dedup job's inputs (files, gzip data, "-" for stdin; stdin when none): iterated, their
    lines as InputLines gives them; chunks(), their bytes for the C line engine. Errors as
    InputLines: with stop_on_error=True the input stops at the first unreadable one, whose
    InputError waits in `error`."""

    def __init__(self, names: tuple[str, ...], stop_on_error: bool = False) -> None:
        self.names = tuple(names)
        self.error: InputError | None = None
        self._stop = stop_on_error
        self._lines: InputLines | None = None

    def __iter__(self) -> Iterator[bytes]:
        self._lines = InputLines(self.names, self._stop)
        return self._lines

    def chunks(self, size: int = CHUNK_SIZE, ahead: bool = True) -> Iterator[bytes | None]:
        """The bytes of every input in turn, in chunks of at most `size`, each input followed
        by None; read ahead by a thread, unless the caller reads them on a thread of its own
        (ahead=False: the line worker's feeder, whose ring is the queue)."""
        return read_ahead(self._chunks(size)) if ahead else self._chunks(size)

    def _chunks(self, size: int) -> Iterator[bytes | None]:
        def chunks(stream: BinaryIO | Packed) -> Iterator[bytes | None]:
            if isinstance(stream, Packed):
                raw = stream.raw
                yield from inflated(getattr(raw, "read1", raw.read), size)
            else:  # what a pipe has, without waiting for more
                read = getattr(stream, "read1", stream.read)
                while chunk := read(size):
                    yield chunk
            yield None  # the end of this input

        return _each_input(self, self.names or ("-",), chunks, lambda n: _open(n, _packed))

    def failed(self) -> InputError | None:
        """The error that stopped the input (stop_on_error), whichever way it was read."""
        if self.error is not None:
            return self.error
        return self._lines.error if self._lines is not None else None


def pump(
    items: Iterator[Item],
    take: Callable[[Item], bool],
    end: Callable[[BaseException | None], None],
    name: str,
) -> threading.Thread:
    """Hand every item to take() on a daemon thread, until take() returns False (its consumer
    has gone); then end(None), or end(error) if the items raised. The items are closed on that
    thread (an input's files with them)."""

    def run() -> None:
        try:
            for item in items:
                if not take(item):
                    return
            end(None)
        except BaseException as e:  # the consumer's to raise
            end(e)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def read_ahead(chunks: Iterator[bytes | None], depth: int = 4) -> Iterator[bytes | None]:
    """The same chunks, read by a background thread up to `depth` ahead: decompressing gzip
    (zlib lets go of the GIL) overlaps the caller's work. An error of the reader is raised here,
    in order, after the chunks read before it."""
    import queue  # here: the line worker's feeder (every run but URLSEEN_LINE_WORKER=0) needs none

    items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def end(error: BaseException | None) -> None:  # an error: handed to the consumer
        put(("end", None) if error is None else ("error", error))

    pump(chunks, lambda chunk: put(("chunk", chunk)), end, "urlseen-read-ahead")
    try:
        while True:
            what, value = items.get()
            if what == "end":
                return
            if what == "error":
                raise value
            yield value
    finally:
        stop.set()


def total_bytes(names: tuple[str, ...]) -> int | None:
    """Input size for a progress bar, when every input is a plain, uncompressed file."""
    if not names or any(n == "-" or not os.path.isfile(n) for n in names):
        return None
    for name in names:
        with open(name, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                return None
    return sum(os.path.getsize(n) for n in names)


def refuse_clobbering(
    inputs: tuple[str, ...],
    output: str,
    state: str | os.PathLike[str] | None = None,
    state_is_folder: bool = False,
) -> None:
    """Before anything is opened: every input must be readable, and the output (a file, or
    stdout redirected to one) must be none of the inputs (stdin included), nor the state file,
    nor inside the state folder, existing or about to be made. InputError names the file."""
    for name in inputs:
        if name != "-" and not os.access(name, os.R_OK):
            try:
                os.stat(name)
            except OSError as exc:
                raise InputError(exc.errno, exc.strerror, name) from None
            raise InputError(errno.EACCES, os.strerror(errno.EACCES), name)
    target = _regular_stat(sys.stdout if output == "-" else output)
    what = "stdout" if output == "-" else output
    for name in inputs or ("-",):
        found = _regular_stat(name if name != "-" else sys.stdin)
        if found is not None and target is not None and _same(found, target):
            raise InputError(
                errno.EINVAL,
                f"the output is also the input {_label(name)}: writing it would destroy it "
                "before it is read; write the output elsewhere",
                what,
            )
    if state is None:
        return
    kept = os.path.realpath(state)
    out = None if output == "-" else os.path.realpath(output)  # stdout: by its inode only
    inside = out is not None and state_is_folder and os.path.commonpath([out, kept]) == kept
    found = _regular_stat(state)
    if inside or out == kept or (found and target and _same(found, target)):
        where = f"inside the state folder {os.fspath(state)}" if inside else "the state file"
        raise InputError(
            errno.EINVAL,
            f"the output is {where}: writing it would destroy the state; write the output "
            "elsewhere",
            what,
        )


def _regular_stat(where: str | os.PathLike[str] | TextIO) -> os.stat_result | None:
    """stat of a regular file (by path, or of a standard stream's file), None for anything
    else or nothing (a stream without a file descriptor: a test's)."""
    try:
        if isinstance(where, (str, os.PathLike)):
            found = os.stat(where)
        else:
            found = os.fstat(where.fileno())
    except (OSError, ValueError):
        return None
    return found if stat.S_ISREG(found.st_mode) else None


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_output(path: str, append: bool) -> tuple[BinaryIO, int]:
    """The output file, and how many bytes of a partial last line were cut from it.

    When appending, a line cut by a killed run is removed: its key never reached the state
    (keys go in after their lines are flushed), so the resumed run prints it again, whole.
    """
    if not append or not os.path.exists(path):
        return open(path, "ab" if append else "wb"), 0
    out = open(path, "r+b")  # noqa: SIM115 (returned to the caller, who closes it)
    size = out.seek(0, os.SEEK_END)
    end = size
    while end > 0:
        start = max(0, end - 65536)
        out.seek(start)
        newline = out.read(end - start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end < size:
        out.truncate(end)
    out.seek(end)
    return out, size - end
