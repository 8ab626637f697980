"""A splittable filter leaf's fingerprints, sorted and Elias-Fano coded.

Why: a leaf keeps each URL's fingerprint only so that it can split; coded, the sorted
fingerprints of one leaf take about log2(2^u / n) + 2 bits each instead of 8 bytes each
(measured by benchmarks/splittable/bits.py). A leaf below the root's children knows the top
bits of its URLs' fingerprints (its prefix: prefix routing, splittable/filter.py), so it codes only
the u bits below them.

The block: a 20-byte header (version, u, the low part's width L, n, the prefix, a CRC-32 of
the rest) then the n low parts of L bits, packed, then the high parts in unary (bit
high_i + i set). A block that is damaged (CRC, lengths, counts) raises FormatError: a split
never routes fingerprints it cannot trust.

numpy packs and unpacks the bits; splits and grows are the only callers.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence

import numpy as np

from urlseen.errors import FormatError

VERSION = 5
_HEADER = struct.Struct("<BBBxIQI")  # version, universe bits, low bits, n, prefix, crc32


def low_bits(n: int, universe: int) -> int:
    """Elias-Fano's low-part width: the one of floor(log2(2^u / n)) - 1 .. + 1 that makes the
    code shortest (n L + n + 2^u / 2^L bits)."""
    if n == 0:
        return 0
    base = math.floor(universe - math.log2(n))
    widths = [w for w in (base - 1, base, base + 1) if 0 <= w <= universe]
    return min(widths, key=lambda w: n * w + n + (1 << (universe - w)))


def encode(values: np.ndarray, universe: int, prefix: int = 0) -> bytes:
    """The block of these fingerprints' low `universe` bits (any order; their top bits are the
    leaf's prefix, which the header keeps)."""
    if not 0 <= universe <= 64:
        raise ValueError(f"universe must be 0..64 bits, not {universe}")
    mask = np.uint64((1 << universe) - 1)
    rest = np.sort(np.asarray(values, dtype=np.uint64) & mask)
    n, width = len(rest), low_bits(len(rest), universe)
    if n == 0:
        payload = b""
    else:
        lows = rest & np.uint64((1 << width) - 1) if width else np.zeros(n, np.uint64)
        highs = (rest >> np.uint64(width)).astype(np.int64) if width < 64 else np.zeros(n, np.int64)
        shifts = np.arange(width, dtype=np.uint64)
        low_part = ((lows[:, None] >> shifts) & np.uint64(1)).astype(np.uint8).ravel()
        upper = np.zeros(n + int(highs[-1]) + 1, dtype=np.uint8)
        upper[highs + np.arange(n)] = 1
        payload = (
            np.packbits(low_part, bitorder="little").tobytes()
            + np.packbits(upper, bitorder="little").tobytes()
        )
    header = _HEADER.pack(VERSION, universe, width, n, prefix, zlib.crc32(payload))
    return header + payload


def decode(block: bytes) -> tuple[np.ndarray, int, int]:
    """(fingerprints with the prefix put back on top, sorted; universe; prefix)."""
    if len(block) < _HEADER.size:
        raise FormatError(f"a coded fingerprint block of {len(block)} bytes: damaged")
    version, universe, width, n, prefix, crc = _HEADER.unpack_from(block)
    payload = block[_HEADER.size :]
    if version != VERSION or universe > 64 or width != low_bits(n, universe):
        raise FormatError("a coded fingerprint block with a header this version cannot read")
    if zlib.crc32(payload) != crc:
        raise FormatError("a coded fingerprint block fails its checksum: damaged")
    if n == 0:
        return np.zeros(0, dtype=np.uint64), universe, prefix
    low_bytes = -(-n * width // 8)
    raw = np.frombuffer(payload, dtype=np.uint8)
    lows_bits = np.unpackbits(raw[:low_bytes], bitorder="little")[: n * width]
    upper = np.flatnonzero(np.unpackbits(raw[low_bytes:], bitorder="little"))
    if len(lows_bits) != n * width or len(upper) != n:
        raise FormatError("a coded fingerprint block of the wrong length: damaged")
    highs = (upper - np.arange(n)).astype(np.uint64)
    if width:
        weights = np.uint64(1) << np.arange(width, dtype=np.uint64)
        lows = lows_bits.reshape(n, width).astype(np.uint64) @ weights
        rest = (highs << np.uint64(width)) | lows if width < 64 else lows
    else:
        rest = highs
    if universe < 64 and int(rest[-1]) >> universe:
        raise FormatError("a coded fingerprint block holds values beyond its universe: damaged")
    top = np.uint64(prefix << universe) if universe < 64 else np.uint64(0)
    return rest | top, universe, prefix


def from_bytes(raw: bytes, width: int) -> np.ndarray:
    """Fingerprints stored raw, `width` little-endian bytes each, as integers."""
    if len(raw) % width:
        raise FormatError(f"raw fingerprints of {len(raw)} bytes, not a multiple of {width}")
    padded = np.zeros((len(raw) // width, 8), dtype=np.uint8)
    padded[:, :width] = np.frombuffer(raw, dtype=np.uint8).reshape(-1, width)
    return padded.view("<u8").ravel().astype(np.uint64)


def to_bytes(values: np.ndarray, width: int) -> list[bytes]:
    """Each fingerprint as `width` little-endian bytes (what a leaf hashes, claims and keeps)."""
    raw = np.asarray(values, dtype="<u8").tobytes()
    return [raw[i : i + width] for i in range(0, len(raw), 8)]


def values_of(fps: Sequence[bytes]) -> np.ndarray:
    return from_bytes(b"".join(fps), len(fps[0])) if fps else np.zeros(0, dtype=np.uint64)
