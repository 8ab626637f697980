"""The on-disk header of every urlseen state file; the layout table lives here and in
ARCHITECTURE.md, nowhere else.

A state file is one page of header followed by the filter's data (bits or counters), page
aligned so it can be memory-mapped in place. Opening reads only the header: a 1 GB filter opens
in microseconds.

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

Count, flags and data CRC change while the file is open, so the header CRC leaves them out;
everything that decides which bits a key maps to is under it.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from urlseen.errors import FormatError

MAGIC = b"\x89URLSEEN"
FORMAT_VERSION = 1
HEADER_SIZE = 4096
COUNT_OFFSET = 32
FLAG_OPEN = 1
FLAG_DATA_CRC = 2

# magic, version, reserved, data offset, data length, params length
_STATIC = struct.Struct("<8sHHIQI")
_CRC = struct.Struct("<I")
_LIVE = struct.Struct("<QII")  # count, flags, data crc
_PARAMS_AT = 48
MAX_PARAMS = HEADER_SIZE - _PARAMS_AT


@dataclass
class Header:
    """A decoded header: params say what the data is; count and flags are the live fields."""

    params: dict[str, Any]
    data_length: int
    count: int = 0
    flags: int = 0
    data_crc: int = 0
    data_offset: int = HEADER_SIZE

    def encode(self) -> bytes:
        params = json.dumps(self.params, sort_keys=True, separators=(",", ":")).encode()
        if len(params) > MAX_PARAMS:
            raise FormatError(f"filter parameters take {len(params)} bytes; at most {MAX_PARAMS}")
        static = _STATIC.pack(
            MAGIC, FORMAT_VERSION, 0, self.data_offset, self.data_length, len(params)
        )
        crc = zlib.crc32(params, zlib.crc32(static))
        live = _LIVE.pack(self.count, self.flags, self.data_crc)
        return static + _CRC.pack(crc) + live + params

    def encode_live(self) -> bytes:
        """Bytes COUNT_OFFSET.. of the header: what changes while the file is open."""
        return _LIVE.pack(self.count, self.flags, self.data_crc)


def decode(raw: bytes, file_size: int, where: str) -> Header:
    """Parse and check a header; FormatError says what is wrong with which file.

    Checks, in order: the file is long enough to hold a header; the magic; the version; the
    header CRC; the params; that the file holds all the data the header announces.
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
    if data_offset < _PARAMS_AT + params_len:
        raise FormatError(f"{where}: corrupted header (data offset {data_offset})")
    if file_size < data_offset + data_length:
        raise FormatError(
            f"{where}: truncated: {file_size} bytes, the header announces "
            f"{data_offset + data_length}"
        )
    count, flags, data_crc = _LIVE.unpack_from(raw, COUNT_OFFSET)
    return Header(params, data_length, count, flags, data_crc, data_offset)


def require(params: dict[str, Any], where: str, **types: type) -> None:
    """Check that params has each named field with the given type (a corrupt or foreign file
    that passed the CRC must still not be trusted blindly)."""
    for name, typ in types.items():
        value = params.get(name)
        if not isinstance(value, typ) or (isinstance(value, bool) and typ is not bool):
            raise FormatError(f"{where}: parameter {name!r} missing or invalid ({value!r})")
