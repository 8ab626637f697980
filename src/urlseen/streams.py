"""The dedup job's streams: lines (or byte chunks) in from files, .gz files or stdin; the output
file, resumed without the partial last line a killed run may have left."""

from __future__ import annotations

import contextlib
import gzip
import os
import queue
import sys
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO


def open_input(name: str) -> BinaryIO:
    """A file, a .gz file (decompressed), or "-" for stdin."""
    if name == "-":
        return sys.stdin.buffer
    if name.endswith(".gz"):
        return gzip.open(name, "rb")  # type: ignore[return-value]
    return open(name, "rb")


def input_lines(names: tuple[str, ...]) -> Iterator[bytes]:
    """The lines of every input in turn (stdin when there is none), newlines kept."""
    for name in names or ("-",):
        with contextlib.ExitStack() as stack:
            stream = open_input(name)
            if name != "-":
                stack.enter_context(stream)
            yield from stream


CHUNK_SIZE = 1 << 20


def input_chunks(names: tuple[str, ...], size: int = CHUNK_SIZE) -> Iterator[bytes | None]:
    """The bytes of every input in turn (stdin when there is none), in chunks of at most `size`,
    each input followed by None. A .gz file is read in full chunks; anything else with read1,
    which hands over what a pipe has without waiting for more."""
    for name in names or ("-",):
        with contextlib.ExitStack() as stack:
            stream = open_input(name)
            if name != "-":
                stack.enter_context(stream)
            read = stream.read if name.endswith(".gz") else getattr(stream, "read1", stream.read)
            while chunk := read(size):
                yield chunk
        yield None


class Inputs:
    """The dedup job's inputs (files, .gz files, "-" for stdin; stdin when none): iterated, their
    lines as input_lines gives them; chunks(), their bytes for the C line engine."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = tuple(names)

    def __iter__(self) -> Iterator[bytes]:
        return input_lines(self.names)

    def chunks(self, size: int = CHUNK_SIZE) -> Iterator[bytes | None]:
        return read_ahead(input_chunks(self.names, size))


def read_ahead(chunks: Iterator[bytes | None], depth: int = 4) -> Iterator[bytes | None]:
    """The same chunks, read by a background thread up to `depth` ahead: decompressing a .gz
    (zlib lets go of the GIL) overlaps the caller's work. An error of the reader is raised here,
    in order, after the chunks read before it."""
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

    def read() -> None:
        try:
            for chunk in chunks:
                if not put(("chunk", chunk)):
                    return
            put(("end", None))
        except BaseException as e:  # handed to the consumer, which raises it
            put(("error", e))
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    reader = threading.Thread(target=read, name="urlseen-read-ahead", daemon=True)
    reader.start()
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
    """Input size for a progress bar, when every input is a plain file."""
    if not names or any(n == "-" or n.endswith(".gz") for n in names):
        return None
    return sum(os.path.getsize(n) for n in names)


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
