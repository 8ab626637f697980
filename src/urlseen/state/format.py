"""The on-disk header of every urlseen state file; the layout table lives here and in
ARCHITECTURE.md, nowhere else.

A state file is one page of header followed by the filter's data (bits or counters), page
aligned so it can be memory-mapped in place. Every byte of it is under a checksum:

    offset size  field
    0      8     magic b"\\x89URLSEEN" (the high first byte catches text-mode mangling)
    8      2     format version, u16 little-endian (this module writes FORMAT_VERSION)
    10     2     reserved, 0
    12     4     data offset in bytes (u32; the header page size)
    16     8     data length in bytes (u64)
    24     4     params length in bytes (u32)
    28     4     CRC32 of bytes 0..27 and of the params
    32     8     count: keys reported new (u64), kept live by the C core while open
    40     4     flags (u32): 1 = open for writing (not closed cleanly), 2 = data CRC valid
    44     4     CRC32 of the data, written on a clean close (valid when flag 2 is set)
    48     n     params: UTF-8 JSON object ({"kind": "bloom", "nbits": ..., ...})
    48+n   ...   zeros
    4092   4     seal (version 2): CRC32 of bytes 32..4091, the count read as 0 while flag 1
                 is set (the C core changes it on every new key; the seal is rewritten only
                 when the flags change)

Count, flags and data CRC change while the file is open, so the header CRC leaves them out;
everything that decides which bits a key maps to is under it, and the seal covers the rest of
the page. A version 2 file is exactly data offset + data length bytes long, the data offset is
the header page size, and a file that was closed cleanly has a valid data CRC. Version 1 files
(no seal) are still read; a writer rewrites their header as version 2.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

from urlseen._frozen import Record
from urlseen.errors import FormatError

MAGIC = b"\x89URLSEEN"
FORMAT_VERSION = 2
HEADER_SIZE = 4096
COUNT_OFFSET = 32
FLAG_OPEN = 1
FLAG_DATA_CRC = 2

# magic, version, reserved, data offset, data length, params length
_STATIC = struct.Struct("<8sHHIQI")
_CRC = struct.Struct("<I")
_LIVE = struct.Struct("<QII")  # count, flags, data crc
_PARAMS_AT = 48
SEAL_AT = HEADER_SIZE - _CRC.size
MAX_PARAMS = SEAL_AT - _PARAMS_AT


def seal(page: bytes | bytearray | memoryview) -> int:
    """The seal of a header page: CRC32 of bytes 32..4091, the count read as 0 while the
    open flag is set (a writer's count changes without the seal being rewritten)."""
    (flags,) = _CRC.unpack_from(page, 40)
    with memoryview(page) as view:
        count = bytes(8) if flags & FLAG_OPEN else view[COUNT_OFFSET : COUNT_OFFSET + 8]
        return zlib.crc32(view[COUNT_OFFSET + 8 : SEAL_AT], zlib.crc32(count))


class Header(Record):
    """A decoded header: params say what the data is; count and flags are the live fields."""

    __slots__ = (  # noqa: RUF023
        "params", "data_length", "count", "flags", "data_crc", "data_offset", "version"
    )  # fmt: skip
    params: dict[str, Any]
    data_length: int
    count: int
    flags: int
    data_crc: int
    data_offset: int
    version: int

    def __init__(
        self,
        params: dict[str, Any],
        data_length: int,
        count: int = 0,
        flags: int = 0,
        data_crc: int = 0,
        data_offset: int = HEADER_SIZE,
        version: int = FORMAT_VERSION,
    ) -> None:
        self._init(params, data_length, count, flags, data_crc, data_offset, version)

    def encode(self) -> bytes:
        """The whole header page, as this module writes it (version 2, sealed)."""
        params = json.dumps(self.params, sort_keys=True, separators=(",", ":")).encode()
        if len(params) > MAX_PARAMS:
            raise FormatError(f"filter parameters take {len(params)} bytes; at most {MAX_PARAMS}")
        static = _STATIC.pack(
            MAGIC, FORMAT_VERSION, 0, self.data_offset, self.data_length, len(params)
        )
        crc = zlib.crc32(params, zlib.crc32(static))
        live = _LIVE.pack(self.count, self.flags, self.data_crc)
        page = bytearray((static + _CRC.pack(crc) + live + params).ljust(HEADER_SIZE, b"\0"))
        _CRC.pack_into(page, SEAL_AT, seal(page))
        return bytes(page)


def decode(raw: bytes, file_size: int, where: str) -> Header:
    """Parse and check a header page; FormatError says what is wrong with which file.

    Checks, in order: the file is long enough to hold a header; the magic; the version; the
    header CRC; the params; that the file holds all the data the header announces; and for
    version 2 the seal and the flags.
    """
    if len(raw) < _PARAMS_AT:
        raise FormatError(f"{where}: too short ({file_size} bytes) to be a urlseen state file")
    magic, version, _reserved, data_offset, data_length, params_len = _STATIC.unpack_from(raw)
    if magic != MAGIC:
        raise FormatError(f"{where}: not a urlseen state file (magic {magic!r})")
    if version > FORMAT_VERSION:
        raise FormatError(
            f"{where}: format version {version} was written by a newer urlseen; "
            f"this one reads up to version {FORMAT_VERSION}"
        )
    if version < 1:
        raise FormatError(f"{where}: invalid format version {version}")
    if params_len > MAX_PARAMS or _PARAMS_AT + params_len > len(raw):
        raise FormatError(f"{where}: corrupted header (params length {params_len})")
    params_raw = bytes(raw[_PARAMS_AT : _PARAMS_AT + params_len])
    (stored_crc,) = _CRC.unpack_from(raw, 28)
    if zlib.crc32(params_raw, zlib.crc32(bytes(raw[:28]))) != stored_crc:
        raise FormatError(f"{where}: corrupted header (checksum mismatch)")
    try:
        params = json.loads(params_raw)
    except ValueError as exc:  # the CRC matched, so this is a writer bug, not corruption
        raise FormatError(f"{where}: unreadable parameters ({exc})") from exc
    if not isinstance(params, dict):
        raise FormatError(f"{where}: unreadable parameters (not an object)")
    if data_offset < _PARAMS_AT + params_len or (version > 1 and data_offset != HEADER_SIZE):
        raise FormatError(f"{where}: corrupted header (data offset {data_offset})")
    expected = data_offset + data_length
    if file_size < expected:
        raise FormatError(f"{where}: truncated: {file_size} bytes, the header announces {expected}")
    count, flags, data_crc = _LIVE.unpack_from(raw, COUNT_OFFSET)
    if version > 1:
        (stored_seal,) = _CRC.unpack_from(raw, SEAL_AT)
        if seal(raw) != stored_seal:
            raise FormatError(f"{where}: corrupted header (seal checksum mismatch)")
        if flags not in (FLAG_OPEN, FLAG_DATA_CRC):  # open for writing, or sealed
            raise FormatError(f"{where}: corrupted header (flags {flags:#x})")
    return Header(params, data_length, count, flags, data_crc, data_offset, version)


def check_length(header: Header, file_size: int, where: str) -> None:
    """A version 2 file holds nothing after its data (decode checked that nothing is missing);
    run after the filter's own check of the params, whose message says more."""
    expected = header.data_offset + header.data_length
    if header.version > 1 and file_size > expected:
        raise FormatError(
            f"{where}: {file_size} bytes, the header announces {expected}: "
            f"{file_size - expected} bytes too many (not written by urlseen)"
        )


def require(params: dict[str, Any], where: str, **types: type) -> None:
    """Check that params has each named field with the given type (a corrupt or foreign file
    that passed the CRC must still not be trusted blindly)."""
    for name, typ in types.items():
        value = params.get(name)
        if not isinstance(value, typ) or (isinstance(value, bool) and typ is not bool):
            raise FormatError(f"{where}: parameter {name!r} missing or invalid ({value!r})")
