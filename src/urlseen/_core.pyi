"""Typed surface of urlseen's C extension: the whole C API on one screen."""

from collections.abc import Iterable
from typing import Final

from typing_extensions import Buffer

Key = str | bytes | Buffer

LAYOUT_STANDARD: Final[int]
LAYOUT_BLOCKED: Final[int]
BLOCK_BITS: Final[int]
MAX_K: Final[int]
HASH_XXH3_128: Final[int]
HASH_MURMUR3_X64_128: Final[int]

def murmur3_x64_128(key: Key, seed: int = 0) -> bytes:
    """The 16-byte MurmurHash3 x64-128 digest of key (str is hashed as UTF-8)."""

def xxh3_128(key: Key, seed: int = 0) -> bytes:
    """The 16-byte XXH3-128 digest of key (str as UTF-8): low64 then high64, each little-endian."""

def positions(key: Key, nbits: int, k: int, layout: int, seed: int = 0, hash: int = 0) -> list[int]:
    """The k bit positions of key in a filter of nbits bits."""

def set_prefetch_distance(keys: int) -> int:
    """Set how many keys ahead batches prefetch (0: off); returns the previous value."""

class BitFilter:
    """Bloom-filter probes over bits at byte `offset` of a buffer the caller owns."""

    def __init__(
        self,
        buffer: Buffer,
        offset: int,
        nbits: int,
        k: int,
        layout: int,
        seed: int = 0,
        count: int = 0,
        count_offset: int = -1,
        hash: int = 0,
    ) -> None: ...
    @property
    def nbits(self) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def layout(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def hash(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def readonly(self) -> bool: ...
    count: int
    def add(self, key: Key) -> bool: ...
    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    def add_many(self, keys: Iterable[Key]) -> list[bool]: ...
    def update(self, keys: Iterable[Key]) -> int: ...
    def contains_many(self, keys: Iterable[Key]) -> list[bool]: ...
    def positions(self, key: Key) -> list[int]: ...
    def popcount(self) -> int: ...
    def _merge_bits(self, other: BitFilter) -> None: ...
    def _release(self) -> None: ...
