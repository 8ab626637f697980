"""Small JSON files under a CRC of their exact bytes (the rotating filter's manifest, a SQLite
store's seal), replaced atomically.

    {"crc32":"<8 lower-case hex digits>","body":<the body, compact JSON>}\\n

The CRC covers the body's bytes as stored, and the frame around it is fixed, so any flipped
bit is caught: none can hide in a spelling JSON would read as the same value (1e-06, 1E-06).
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from urlseen.errors import FormatError
from urlseen.state import space

_HEAD = b'{"crc32":"'
_MIDDLE = b'","body":'
_TAIL = b"}\n"
_BODY_AT = len(_HEAD) + 8 + len(_MIDDLE)
_HEX = frozenset(b"0123456789abcdef")


def encode(body: dict[str, Any]) -> bytes:
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return _HEAD + b"%08x" % zlib.crc32(text) + _MIDDLE + text + _TAIL


def is_sealed(raw: bytes) -> bool:
    """Whether raw is framed as a sealed file (else an older format, or not ours)."""
    return raw.startswith(_HEAD)


def decode(raw: bytes, where: str, what: str) -> dict[str, Any]:
    """The body; FormatError naming `where` if a byte is off or the body is not an object."""
    digits = raw[len(_HEAD) : len(_HEAD) + 8]
    if (
        not raw.startswith(_HEAD)
        or len(digits) != 8
        or not set(digits) <= _HEX
        or raw[len(_HEAD) + 8 : _BODY_AT] != _MIDDLE
        or not raw.endswith(_TAIL)
        or len(raw) < _BODY_AT + len(_TAIL)
    ):
        raise FormatError(f"{where}: corrupted {what} (its frame is damaged)")
    text = raw[_BODY_AT : -len(_TAIL)]
    if zlib.crc32(text) != int(digits, 16):
        raise FormatError(f"{where}: corrupted {what} (checksum mismatch)")
    try:
        body = json.loads(text)
    except ValueError:  # the CRC matched: a writer bug, not corruption
        body = None
    if not isinstance(body, dict):
        raise FormatError(f"{where}: unreadable {what}")
    return body


def read(path: Path, what: str) -> dict[str, Any]:
    """decode() of the file at path (FileNotFoundError passes)."""
    return decode(path.read_bytes(), str(path), what)


def write(path: Path, body: dict[str, Any]) -> None:
    """Replace the file at path atomically (temp file, fsync, rename, fsync of the folder)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with space.naming(path), open(tmp, "xb") as f:
            f.write(encode(body))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_folder(path)


def sync_folder(path: Path) -> None:
    """fsync the folder holding path: a rename or unlink in it survives an OS crash."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
