"""BloomFilter: the baseline URL-seen test, in memory or in a memory-mapped state file."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from urlseen import _core, defaults
from urlseen.bloom import sizing
from urlseen.canonical import add_urls
from urlseen.errors import ConfigError, FormatError, IncompatibleFiltersError
from urlseen.hashes import BLOOM_HASH, HASHES, check_hash, check_seed
from urlseen.protocol import Batch, FilterStats, creator
from urlseen.state.persistent import StoreBacked, stored_params

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from urlseen.state import format
    from urlseen.state.store import BufferStore

__all__ = ["DEFAULT_HASH", "HASHES", "BloomFilter"]

DEFAULT_HASH = BLOOM_HASH

LAYOUT_CODES = {"standard": _core.LAYOUT_STANDARD, "blocked": _core.LAYOUT_BLOCKED}


class BloomFilter(StoreBacked, _core.BitFilter):
    """A Bloom filter sized from capacity and error_rate: the URL-seen test in bounded memory.

    `add` (check-and-add), `in`, `add_many`, `contains_many` and `len` are the C core's own
    methods, so a per-call test costs one C call. False positives happen at about error_rate
    once `capacity` keys are in (a new URL reported seen: a page not crawled); false negatives
    never do.

    Args:
        capacity: distinct keys the filter must hold at error_rate.
        error_rate: false-positive rate at capacity, in (0, 1).
        layout: "blocked" (default): every key in one 64-byte cache line, fastest once the
            filter outgrows the CPU cache, at some extra memory (measured by
            benchmarks/peers/layouts.py); "standard": the textbook filter, minimal memory.
        seed: hash seed, in [0, 2**32); filters combine only with the same seed and hash.
        hash: "xxh3_64" (default: the probes need no more than 64 bits, and it is the
            fastest), "xxh3_128", "murmur3_x64_128" or "md5"; each fixed forever, and state
            files record which.
        path: keep the filter in a new state file there (memory-mapped), as create() does;
            None (default): in memory.
        overwrite: with path, replace an existing file (else FileExistsError).

    Example:
        >>> seen = BloomFilter(capacity=1_000_000, error_rate=0.001)
        >>> seen.add("https://example.com/")
        True
        >>> seen.add("https://example.com/")
        False
    """

    __slots__ = ("_store",)  # no per-instance dict: `f.add(url)` finds the C method at once
    _store: BufferStore | None

    def __init__(
        self,
        capacity: int,
        error_rate: float = defaults.BLOOM_ERROR_RATE,
        *,
        layout: str = "blocked",
        seed: int = 0,
        hash: str = DEFAULT_HASH,
        path: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
    ) -> None:
        params = _params(capacity, error_rate, layout, seed, hash)
        self._attach(self._new_store(params, path, overwrite))

    # -- construction -------------------------------------------------------------------

    create = creator(
        __init__,
        """Create an empty filter backed by a new state file at path (memory-mapped): the
        constructor with path=path.

        Raises FileExistsError if path exists, unless overwrite is True.
        """,
    )

    @staticmethod
    def _check_header(header: format.Header, where: str) -> None:
        _check_header(header, where)

    @staticmethod
    def _data_bytes(params: dict[str, Any]) -> int:
        return _nbytes(params)

    @staticmethod
    def _shape(params: dict[str, Any]) -> tuple[int, ...]:
        return params["nbits"], params["k"], LAYOUT_CODES[params["layout"]]

    def update(self, keys: Iterable[_core.Key]) -> int:
        """Add every key; how many were new."""
        self._live_store().check()
        return super().update(keys)

    def add_urls(self, urls: Iterable[str | bytes], *, canonicalize: bool = True) -> list[bool]:
        """Canonicalize and check-and-add URLs in one call, keyed and probed in C: the answers
        of add_many on their canonical forms (urlseen.canonical.add_urls)."""
        return add_urls(self, urls, canonicalize=canonicalize)

    # -- combination and inspection ------------------------------------------------------

    def union(self, other: BloomFilter) -> BloomFilter:
        """A new in-memory filter holding the keys of both (bitwise OR).

        Its len() is an estimate from the number of set bits: the two may share keys.

        Raises:
            IncompatibleFiltersError: the filters differ in size, k, layout or seed.
        """
        if not isinstance(other, BloomFilter):
            raise TypeError(f"can only combine with a BloomFilter, not {type(other).__name__!r}")
        mine, theirs = self._live_store().params(), other._live_store().params()
        fields = ("nbits", "k", "layout", "seed", "hash")
        diff = [
            f"{f}: {mine.get(f)!r} != {theirs.get(f)!r}"
            for f in fields
            if mine.get(f) != theirs.get(f)
        ]
        if diff:
            raise IncompatibleFiltersError("cannot combine filters: " + "; ".join(diff))
        out = type(self)._in_memory(mine)
        out._merge_bits(self)
        out._merge_bits(other)
        out.count = round(sizing.estimate_count(self.nbits, self.k, out.popcount()))
        return out

    def __or__(self, other: object) -> BloomFilter:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return self.union(other)

    def stats(self) -> FilterStats:
        """Capacity, count, bits and error rates; O(1), reads no bits."""
        params = self._live_store().params()
        count = len(self)
        return FilterStats(
            kind="bloom",
            capacity=params["capacity"],
            count=count,
            bits=self.nbits,
            error_rate=params["error_rate"],
            estimated_error_rate=sizing.error_rate_at(params["layout"], self.nbits, self.k, count),
            details={
                "k": self.k,
                "layout": params["layout"],
                "likely_dropped": sizing.likely_dropped(
                    params["layout"], self.nbits, self.k, count, params["capacity"]
                ),
                **self._store_details(params),
            },
        )

    def _repr_fields(self) -> str:
        where = f" path={self.path!r}" if self.path else ""
        return f"layout={self._live_store().params()['layout']} count={len(self)}{where}"

    # -- the dedup job's batches (protocol.DedupStep) --------------------------------------

    def _probes_itself(self) -> bool:
        """The line engine may probe the bits directly: add_many and contains_many are this
        class's own (a subclass that changes them gets its batches through them)."""
        kind = type(self)
        return kind.add_many is BloomFilter.add_many and (
            kind.contains_many is BloomFilter.contains_many
        )

    def dedup_hasher(self) -> BloomFilter | None:
        return self if self._probes_itself() else None

    def dedup_step(
        self, batch: Batch, write: Callable[[list[bool] | None], object], transactional: bool
    ) -> int | None:
        """The line engine probes the bits in place; transactional: tested, the new lines
        written and flushed, then added."""
        if not isinstance(batch, _core.LineEngine) or not self._probes_itself():
            return None
        self.check_store()  # the engine probes the map: a state file cut short, not a SIGBUS
        if not transactional:
            new = batch.bloom_add(self)
            write(None)
            return new
        new = batch.bloom_test(self)
        write(None)
        if new:
            self.check_store()  # again: the write may have taken a while
            batch.bloom_commit(self)
        return new


def _params(
    capacity: object, error_rate: object, layout: object, seed: object, hash: object
) -> dict[str, Any]:
    capacity, rate = sizing.check_target(capacity, error_rate)
    size = sizing.size_filter(capacity, rate, layout)
    check_hash(hash)
    return {
        "kind": "bloom",
        "layout": size.layout,
        "nbits": size.nbits,
        "k": size.k,
        "seed": check_seed(seed),
        "hash": hash,
        "capacity": capacity,
        "error_rate": rate,
    }


def _nbytes(params: dict[str, Any]) -> int:
    return (int(params["nbits"]) + 7) // 8


def _check_header(header: format.Header, where: str) -> None:
    """A state file's params must describe a Bloom filter this code can probe, exactly."""
    params = stored_params(
        header,
        where,
        "bloom",
        "a Bloom filter",
        nbits=int,
        k=int,
        seed=int,
        capacity=int,
        layout=str,
        hash=str,
    )
    if params["layout"] not in LAYOUT_CODES:
        raise FormatError(f"{where}: unknown layout {params['layout']!r}")
    try:
        sizing.check_target(params["capacity"], params["error_rate"])
    except ConfigError as exc:
        raise FormatError(f"{where}: invalid parameters ({exc})") from None
    nbits, k = params["nbits"], params["k"]
    blocked = params["layout"] == "blocked"
    if nbits <= 0 or not 1 <= k <= _core.MAX_K or (blocked and nbits % _core.BLOCK_BITS):
        raise FormatError(f"{where}: invalid filter shape (nbits={nbits}, k={k})")
    if header.data_length != _nbytes(params):
        raise FormatError(f"{where}: data length {header.data_length} does not match {nbits} bits")
    if header.count > nbits:  # every new key sets at least one bit
        raise FormatError(f"{where}: corrupted count {header.count} for {nbits} bits")
