"""BloomFilter: the baseline URL-seen test, in memory or in a memory-mapped state file."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from urlseen import _core
from urlseen.bloom import sizing
from urlseen.errors import ConfigError, FormatError, IncompatibleFiltersError
from urlseen.hashes import BLOOM_HASH, HASHES, check_hash, check_seed
from urlseen.protocol import FilterStats, creator
from urlseen.state.persistent import StoreBacked, stored_params
from urlseen.state.store import BufferStore

if TYPE_CHECKING:
    from urlseen.state import format

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
            filter outgrows the CPU cache, at some extra memory (8.6% at 0.001, see
            benchmarks/RESULTS.md); "standard": the textbook filter, minimal memory.
        seed: hash seed, in [0, 2**32); filters combine only with the same seed and hash.
        hash: "xxh3_64" (default: the probes need no more than 64 bits, ~6 ns per URL),
            "xxh3_128" (~9 ns; the default before xxh3_64 existed), "murmur3_x64_128" (~22 ns)
            or "md5"; each fixed forever, and state files record which.
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
        error_rate: float = 0.001,
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
                **self._store_details(params),
            },
        )

    def _repr_fields(self) -> str:
        where = f" path={self.path!r}" if self.path else ""
        return f"layout={self._live_store().params()['layout']} count={len(self)}{where}"


def _params(
    capacity: object, error_rate: object, layout: object, seed: object, hash: object
) -> dict[str, Any]:
    size = sizing.size_filter(capacity, error_rate, layout)
    check_hash(hash)
    return {
        "kind": "bloom",
        "layout": size.layout,
        "nbits": size.nbits,
        "k": size.k,
        "seed": check_seed(seed),
        "hash": hash,
        "capacity": capacity,
        "error_rate": float(error_rate),  # type: ignore[arg-type]
    }


def _nbytes(params: dict[str, Any]) -> int:
    return (int(params["nbits"]) + 7) // 8


def _check_header(header: format.Header, where: str) -> None:
    """A state file's params must describe a Bloom filter this code can probe, exactly."""
    params = stored_params(
        header, where, "bloom", "a Bloom filter",
        nbits=int, k=int, seed=int, capacity=int, layout=str, hash=str,
    )  # fmt: skip
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
