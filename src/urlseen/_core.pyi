"""Typed surface of urlseen's C extension: the whole C API on one screen."""

from collections.abc import Iterable
from typing import Any, Final, final

from _typeshed import structseq
from typing_extensions import Buffer

Key = str | bytes | Buffer

LAYOUT_STANDARD: Final[int]
LAYOUT_BLOCKED: Final[int]
BLOCK_BITS: Final[int]
MAX_K: Final[int]
HASH_XXH3_128: Final[int]
HASH_MURMUR3_X64_128: Final[int]
HASH_MD5: Final[int]
FPCACHE_ENTRY_BYTES: Final[int]

def murmur3_x64_128(key: Key, seed: int = 0) -> bytes:
    """The 16-byte MurmurHash3 x64-128 digest of key (str is hashed as UTF-8)."""

def xxh3_128(key: Key, seed: int = 0) -> bytes:
    """The 16-byte XXH3-128 digest of key (str as UTF-8): low64 then high64, each little-endian."""

def md5(key: Key, seed: int = 0) -> bytes:
    """The 16-byte MD5 digest of key (str as UTF-8); a seed is prefixed as 4 LE bytes."""

def digests(keys: Iterable[Key], hash: int = ..., seed: int = 0) -> list[bytes]:
    """The 16-byte digest of every key (default MD5)."""

def byte_masks(
    keys: Iterable[Key], nbits: int, k: int, layout: int, seed: int = 0, hash: int = 0
) -> bytes:
    """Per key: a count byte, then (u32 LE byte offset, u8 mask) records of its bits."""

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

class CountingFilter:
    """Packed saturating counters at byte `offset` of a buffer the caller owns."""

    def __init__(
        self,
        buffer: Buffer,
        offset: int,
        ncounters: int,
        k: int,
        counter_bits: int,
        seed: int = 0,
        count: int = 0,
        count_offset: int = -1,
        hash: int = 0,
    ) -> None: ...
    @property
    def ncounters(self) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def counter_bits(self) -> int: ...
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
    def remove(self, key: Key) -> bool: ...
    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    def add_many(self, keys: Iterable[Key]) -> list[bool]: ...
    def contains_many(self, keys: Iterable[Key]) -> list[bool]: ...
    def remove_many(self, keys: Iterable[Key]) -> list[bool]: ...
    def _digest(self, key: Key) -> bytes: ...
    def _indices(self, fp: bytes) -> list[int]: ...
    def _add_digests(self, fps: Iterable[bytes]) -> list[tuple[int, int]]: ...
    def _remove_digests(self, fps: Iterable[bytes]) -> list[tuple[int, int]]: ...
    def _get(self, index: int) -> int: ...
    def _set(self, index: int, value: int) -> None: ...
    def _zero(self) -> None: ...
    def _histogram(self) -> list[int]: ...
    def _exact_step(
        self, keys: Iterable[Key], cache: FingerprintCache | None, now: int = 0
    ) -> ExactStepResult:
        """One batch of the exact filter's check-and-add: counters first, then the cache."""
    def _release(self) -> None: ...

@final
class ExactStepResult(
    structseq[Any],
    tuple[
        list[bool | None],
        list[bytes],
        list[tuple[int, bytes]],
        list[tuple[bytes, int, int, int]],
        list[tuple[int, int]],
    ],
):
    """What CountingFilter._exact_step decided for one batch, and what is left for the library."""

    __match_args__: Final = (
        "answers",
        "new_fingerprints",
        "undecided",
        "evicted",
        "counter_overflows",
    )
    @property
    def answers(self) -> list[bool | None]:
        """Per key: True new, False a duplicate the cache answered, None undecided."""
    @property
    def new_fingerprints(self) -> list[bytes]:
        """The 16-byte fingerprints of the new keys, in order: the library's inserts."""
    @property
    def undecided(self) -> list[tuple[int, bytes]]:
        """(key index, fingerprint) of each key neither the counters nor the cache decided."""
    @property
    def evicted(self) -> list[tuple[bytes, int, int, int]]:
        """(fingerprint, pending, batch, seen) of cache entries evicted: write them back."""
    @property
    def counter_overflows(self) -> list[tuple[int, int]]:
        """(counter index, delta) of increments the saturated counters could not record."""

class FingerprintCache:
    """Bounded set-associative LRU cache of 16-byte fingerprints with increments to write back:
    committed ones (pending) and those of the batch in progress (batch)."""

    def __init__(self, entries: int) -> None: ...
    @property
    def entries(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def hit(self, fp: bytes, now: int = 0) -> bool: ...
    def insert(
        self, fp: bytes, batch: int = 0, now: int = 0, pending: int = 0
    ) -> tuple[bytes, int, int, int] | None: ...
    def take(self, fp: bytes) -> tuple[int, int, int] | None: ...
    def commit(self) -> list[tuple[bytes, int, int, int]]: ...
    def rollback(self) -> None: ...
    def drain(self) -> list[tuple[bytes, int, int, int]]: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...

MDBF_QUERY_ALL: Final[int]
MDBF_QUERY_ANY: Final[int]
MDBF_MAX_GROUPS: Final[int]

class MDBFilter:
    """Multi-dimensional Bloom-filter probes: groups x (V1 of n1 bits, V2 of n2 bits)."""

    def __init__(
        self,
        buffer: Buffer,
        offset: int,
        groups: int,
        n1: int,
        n2: int,
        k1: int,
        k2: int,
        rule: int,
        seed: int = 0,
        count: int = 0,
        count_offset: int = -1,
        hash: int = 0,
    ) -> None: ...
    @property
    def groups(self) -> int: ...
    @property
    def n1(self) -> int: ...
    @property
    def n2(self) -> int: ...
    @property
    def k1(self) -> int: ...
    @property
    def k2(self) -> int: ...
    @property
    def rule(self) -> int: ...
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
    def contains_many(self, keys: Iterable[Key]) -> list[bool]: ...
    def positions(self, key: Key) -> list[int]: ...
    def popcounts(self) -> list[int]: ...
    def _release(self) -> None: ...
