"""gzip data inflated by zlib directly, in chunks, for the line engine's reader: gzip.GzipFile
parses each member's header and checks its CRC32 and length in Python, and hands its output
through its own buffers; zlib's gzip wrapper does both in C, which costs the reading thread less
CPU (measured by benchmarks/dedup/).

It reads what GzipFile reads, and fails as it fails: members in turn, zero bytes after a member
skipped, EOFError for a stream cut short, BadGzipFile or zlib.error for damaged data, raised
after the chunks inflated before. (One difference: zlib refuses a header with reserved flag
bits set, as gzip(1) does, and checks its optional CRC16; the gzip module ignores both.)
ISA-L's inflate (the isal package) does the work where it is installed: zlib's stream API with
less than half its CPU (benchmarks/dedup/); its errors come out as zlib.error.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # the gzip wrapper: header, CRC32 and ISIZE checked by zlib
_CUT = "Compressed file ended before the end-of-stream marker was reached"  # the gzip module's


def inflated(read: Callable[[int], bytes], size: int, step: int = 1 << 18) -> Iterator[bytes]:
    """The inflated bytes of the gzip data read(n) gives, in chunks of at most `size` bytes,
    every member in turn; compressed input is read `step` bytes at a time."""
    try:
        yield from _inflated(read, size, step, _fast_zlib())
    except _fast_zlib().error as exc:
        raise zlib.error(str(exc)) from None


def _fast_zlib() -> Any:
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib
    return isal_zlib


def _inflated(read: Callable[[int], bytes], size: int, step: int, zlib: Any) -> Iterator[bytes]:
    inflater = zlib.decompressobj(_GZIP_WBITS)
    head = b""  # the current member's first bytes, up to its magic
    data = b""
    full = False  # the last call filled `size`: zlib may hold more output without more input
    while True:
        if not data and not full:
            data = read(step)
            if not data:
                break
        if inflater.eof:  # between members: zero padding, then the next member or the end
            data = data.lstrip(b"\0")
            if not data:
                continue
            inflater, head = zlib.decompressobj(_GZIP_WBITS), b""
        if len(head) < 2:
            head += data[: 2 - len(head)]
            if head != GZIP_MAGIC[: len(head)]:
                raise _not_gzip(head)
        out = inflater.decompress(data, size)
        data = inflater.unconsumed_tail or inflater.unused_data
        full = len(out) == size
        if out:
            yield out
    if not inflater.eof:
        if len(head) < 2:  # a member's first byte alone, as gzip reads it
            raise _not_gzip(head)
        raise EOFError(_CUT)


def _not_gzip(head: bytes) -> Exception:
    """The gzip module's error for data that does not start as gzip does."""
    import gzip  # here: only damaged input needs it

    return gzip.BadGzipFile(f"Not a gzipped file ({head!r})")
