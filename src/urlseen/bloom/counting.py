"""CountingBloomFilter: a Bloom filter that can forget, in memory or in a file.

Each position holds a small saturating counter instead of a bit, so a key can be removed again:
the crawler can re-crawl a page. Removing needs the caller to know the key was added (a false
positive removed would take counts from other keys); ExactFilter adds that knowledge, with its
fingerprint library, and drives this class's counters.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from urlseen import _core, defaults
from urlseen.bloom import sizing as _sizing
from urlseen.errors import ConfigError, FormatError
from urlseen.hashes import DEFAULT_HASH, check_hash, check_seed
from urlseen.protocol import FilterStats, creator
from urlseen.state import format
from urlseen.state.persistent import StoreBacked, stored_params
from urlseen.state.store import BufferStore

if TYPE_CHECKING:
    from typing_extensions import Self

COUNTER_BITS = (2, 4, 8)
BLOCKED_KIND = "counting-blocked"  # a state file's kind: counters in the blocked layout


class CountingBloomFilter(StoreBacked, _core.CountingFilter):
    """A counting Bloom filter sized from capacity and error_rate, with remove().

    `add` is check-and-add: a key whose counters are all above 0 is reported seen and changes
    nothing, so each distinct key is counted once and duplicates never push counters up.
    `remove(key)` decrements; counters at their maximum (2^counter_bits - 1) stay there, which
    is safe (never a false negative) but may leave a residual false positive.

    Args:
        capacity: distinct keys the filter must hold at error_rate.
        error_rate: false-positive rate at capacity, in (0, 1).
        counter_bits: bits per counter, 2, 4 (default, the papers' choice: overflow needs a
            count of 16, probability < 1.4e-15 per counter at the optimal k) or 8.
        k, counters_per_key: set them to override the sizing (the IMP-CBFilter paper's
            experiment uses k=8, counters_per_key=20).
        seed: hash seed, in [0, 2**32).
        hash: "xxh3_128" (default), "murmur3_x64_128" or "md5".
        path: keep the counters in a new state file there (memory-mapped), as create() does;
            None (default): in memory.
        overwrite: with path, replace an existing file (else FileExistsError).
        layout: "standard" (default: a key's counters anywhere in the array), "blocked" (all
            in one 128-byte block: one memory round trip per key instead of k, sized for the
            same error_rate with more counters) or "auto" (blocked when that costs at most a
            quarter more counters and k and counters_per_key are not given; the exact filter's
            choice).

    Example:
        >>> seen = CountingBloomFilter(capacity=1000)
        >>> seen.add("https://example.com/"), seen.add("https://example.com/")
        (True, False)
        >>> seen.remove("https://example.com/"), "https://example.com/" in seen
        (True, False)
    """

    __slots__ = ("_store",)
    _store: BufferStore | None

    def __init__(
        self,
        capacity: int,
        error_rate: float = defaults.EXACT_ERROR_RATE,
        *,
        counter_bits: int = 4,
        k: int | None = None,
        counters_per_key: float | None = None,
        seed: int = 0,
        hash: str = DEFAULT_HASH,
        path: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
        layout: str = "standard",
    ) -> None:
        params = make_params(
            capacity, error_rate, counter_bits, k, counters_per_key, seed, hash, layout
        )
        self._attach(self._new_store(params, path, overwrite))

    def _attach(self, store: BufferStore) -> None:
        super()._attach(store)
        if store.params()["kind"] == BLOCKED_KIND:
            self._set_layout(_sizing.COUNTER_LAYOUTS["blocked"])

    @property
    def layout(self) -> str:
        """ "standard" or "blocked" (see the class's arguments)."""
        return "blocked" if self._live_store().params()["kind"] == BLOCKED_KIND else "standard"

    create = creator(
        __init__,
        """Create an empty filter in a new state file (memory-mapped); FileExistsError if path
        exists, unless overwrite is True.""",
    )

    @staticmethod
    def _check_header(header: format.Header, where: str) -> None:
        check_header(header, where)

    @staticmethod
    def _data_bytes(params: dict[str, Any]) -> int:
        return data_bytes(params)

    @staticmethod
    def _shape(params: dict[str, Any]) -> tuple[int, ...]:
        return params["ncounters"], params["k"], params["counter_bits"]

    def remove_many(self, keys: Iterable[_core.Key]) -> list[bool]:
        """Remove every key; element i is True if key i was present (see remove())."""
        self._live_store().check()
        return super().remove_many(keys)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._live_store().params())

    def histogram(self) -> list[int]:
        """How many counters hold each value 0 .. 2^counter_bits - 1 (reads every counter)."""
        return self._histogram()

    def stats(self) -> FilterStats:
        """Capacity, count, bits and error rates; O(1)."""
        params = self._live_store().params()
        if self.layout == "blocked":
            rate = _sizing.counting_blocked_error_rate(
                len(self), self.ncounters, self.k, self.counter_bits
            )
        else:
            rate = _sizing.standard_error_rate(len(self), self.ncounters, self.k)
        return FilterStats(
            kind="counting",
            capacity=params["capacity"],
            count=len(self),
            bits=self.ncounters * self.counter_bits,
            error_rate=params["error_rate"],
            estimated_error_rate=rate,
            details={
                "layout": self.layout,
                "k": self.k,
                "ncounters": self.ncounters,
                "counter_bits": self.counter_bits,
                **self._store_details(params),
            },
        )

    def _repr_fields(self) -> str:
        return f"counters={self.ncounters}x{self.counter_bits}b k={self.k} count={len(self)}"

    # -- driven by fingerprints: what ExactFilter, which keeps the true record, needs -----------

    @classmethod
    def from_params(
        cls,
        params: dict[str, Any],
        path: str | os.PathLike[str] | None = None,
        *,
        overwrite: bool = False,
    ) -> Self:
        """Empty counters described by `params` (make_params' dict, a copy is kept): in a new
        state file at path (FileExistsError if it exists, unless overwrite), or in memory."""
        return cls.from_store(cls._new_store(dict(params), path, overwrite))

    @property
    def opened_unclean(self) -> bool:
        """True if the state file's last writer did not close it: its counters may disagree
        with what they were counting."""
        return bool(getattr(self._live_store(), "unclean", False))

    def fingerprint(self, key: _core.Key) -> bytes:
        """The key's 16-byte fingerprint, with this filter's hash and seed."""
        return self._digest(key)

    def counter_indices(self, fp: bytes) -> list[int]:
        """The k counter indices of a fingerprint (with repeats)."""
        return self._indices(fp)

    def counter(self, index: int) -> int:
        return self._get(index)

    def set_counter(self, index: int, value: int) -> None:
        """Set one counter (a saturated one recounted from its true count)."""
        self._set(index, value)

    def add_fingerprints(self, fps: Iterable[bytes]) -> list[tuple[int, int]]:
        """Count each fingerprint in, unchecked; the (index, delta) of every increment of a
        counter that reached or was at its maximum (the caller keeps their true counts)."""
        return self._add_digests(fps)

    def remove_fingerprints(self, fps: Iterable[bytes]) -> list[tuple[int, int]]:
        """Count each fingerprint out; (index, 1) for each saturated counter, left unchanged
        (the caller recounts it). RuntimeError if the counters do not hold one."""
        return self._remove_digests(fps)

    def clear(self) -> None:
        """Every counter and the count to 0."""
        self._zero()

    def screen(
        self, keys: Iterable[_core.Key], cache: _core.FingerprintCache | None, now: int
    ) -> _core.ExactStepResult:
        """The counters' and cache's part of a check-and-add: keys with a zero counter are new
        (and counted in), keys the cache holds are duplicates, the rest are left undecided for
        the caller's exact record (see _core.ExactStepResult)."""
        return self._exact_step(keys, cache, now)


def make_params(
    capacity: object,
    error_rate: object,
    counter_bits: object,
    k: object,
    counters_per_key: object,
    seed: object,
    hash: object,
    layout: object = "standard",
) -> dict[str, Any]:
    if counter_bits not in COUNTER_BITS or isinstance(counter_bits, bool):
        raise ConfigError(f"counter_bits must be 2, 4 or 8, not {counter_bits!r}")
    check_hash(hash)
    check_seed(seed)
    capacity, rate = _sizing.check_target(capacity, error_rate)
    size = _sizing.size_counting(capacity, rate, k, counters_per_key)
    layout, m, kk = _sizing.choose_counter_layout(
        layout,
        capacity,
        rate,
        counter_bits,
        (size.ncounters, size.k),
        explicit=k is not None or counters_per_key is not None,
    )
    params = {
        "kind": "counting",
        "ncounters": m,
        "k": kk,
        "counter_bits": counter_bits,
        "seed": seed,
        "hash": hash,
        "capacity": capacity,
        "error_rate": rate,
    }
    if layout == "blocked":  # a kind of its own: an urlseen without it refuses the file
        params["kind"] = BLOCKED_KIND
    return params


def data_bytes(params: dict[str, Any]) -> int:
    return (int(params["ncounters"]) * int(params["counter_bits"]) + 7) // 8


def check_header(header: format.Header, where: str) -> None:
    """A state file's params must describe counters this code can use, exactly."""
    kind = BLOCKED_KIND if header.params.get("kind") == BLOCKED_KIND else "counting"
    params = stored_params(
        header,
        where,
        kind,
        "a counting filter",
        ncounters=int,
        k=int,
        counter_bits=int,
        seed=int,
        capacity=int,
        hash=str,
    )
    try:
        _sizing.check_target(params["capacity"], params["error_rate"])
    except ConfigError as exc:
        raise FormatError(f"{where}: invalid parameters ({exc})") from None
    m, k, bits = params["ncounters"], params["k"], params["counter_bits"]
    if not 1 <= m <= _sizing.MAX_BITS or not 1 <= k <= _core.MAX_K or bits not in COUNTER_BITS:
        raise FormatError(f"{where}: invalid counter shape ({m} x {bits} bits, k={k})")
    if kind == BLOCKED_KIND and m % _sizing.block_counters(bits):
        raise FormatError(f"{where}: {m} counters are not whole blocks of the blocked layout")
    if header.data_length != data_bytes(params):
        raise FormatError(f"{where}: data length {header.data_length} does not match {m} counters")
