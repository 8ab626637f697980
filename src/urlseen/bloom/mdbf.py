"""MultiDimensionalBloomFilter: the multi-dimensional Bloom filter paper's S groups of two bit
vectors, in memory or in a memory-mapped state file.

What it is worth (measured by benchmarks/papers/mdbf.py): under QUERY_ALL it is a partitioned
Bloom filter; its false-positive rate falls as S grows only because memory grows with S, and at
equal memory a standard Bloom filter is as good or slightly better. Its groups can be probed
independently (in parallel, or V2 first with early exit on a miss).
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from typing import Any

from urlseen import _core, defaults
from urlseen.bloom import mdbf_sizing as sizing
from urlseen.bloom.sizing import MAX_BITS, MAX_K, check_target, dropped_while_filling
from urlseen.errors import ConfigError, FormatError, QueryAnyWarning
from urlseen.hashes import DEFAULT_HASH, check_hash, check_seed
from urlseen.protocol import FilterStats, creator
from urlseen.state import format
from urlseen.state.persistent import StoreBacked, stored_params
from urlseen.state.store import BufferStore

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = {"all": _core.MDBF_QUERY_ALL, "any": _core.MDBF_QUERY_ANY}


def _outside_urlseen() -> int:
    """The stacklevel of the first frame outside the urlseen package (the user's call)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def _warn_any() -> None:
    warnings.warn(
        "query='any' (a key is present if ANY group has all its bits set) is the paper's "
        "rule as written, kept for compatibility: its false-positive rate is about S times one "
        "group's and grows with S. Use the default query='all' unless you must reproduce it.",
        QueryAnyWarning,
        stacklevel=_outside_urlseen(),
    )


class MultiDimensionalBloomFilter(StoreBacked, _core.MDBFilter):
    """The paper's multi-dimensional Bloom filter: S groups, each a V1 of N bits (k1 probes) and a
    V2 of N / r bits (k2 probes), every vector with its own hash family.

    `add` (check-and-add), `in`, `add_many`, `contains_many` and `len` are C methods. A key is
    present under query="all" (default) when every group has all its bits set: the rule under
    which, as the paper claims, more groups give fewer false positives. query="any" (present if
    some group is full) is the paper's text as written and warns (QueryAnyWarning): its rate
    rises with S. Neither has false negatives.

    Args:
        capacity: distinct keys the filter must hold at error_rate.
        error_rate: false-positive rate at capacity, in (0, 1).
        groups: S; by default the sizing picks the least memory over S = 1..8.
        k: probes per group (k1 + k2); by default the sizing picks it. k1 is then the split of k
            with the least predicted false-positive rate.
        ratio: r, V2 has N // r bits; by default r = k, as in the paper.
        query: "all" (default) or "any".
        seed: hash seed in [0, 2**32); (group s, vector v) hashes with seed + 2s + v.
        hash: "xxh3_128" (default), "murmur3_x64_128" or "md5".
        path: keep the filter in a new state file there (memory-mapped), as create() does;
            None (default): in memory.
        overwrite: with path, replace an existing file (else FileExistsError).

    Example:
        >>> seen = MultiDimensionalBloomFilter(capacity=10_000, error_rate=0.001, groups=4)
        >>> seen.add("https://example.com/"), seen.add("https://example.com/")
        (True, False)
    """

    __slots__ = ("_store",)
    _store: BufferStore | None

    def __init__(
        self,
        capacity: int,
        error_rate: float = defaults.BLOOM_ERROR_RATE,
        *,
        groups: int | None = None,
        k: int | None = None,
        ratio: int | None = None,
        query: str = "all",
        seed: int = 0,
        hash: str = DEFAULT_HASH,
        path: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
    ) -> None:
        params = _sized_params(capacity, error_rate, groups, k, ratio, query, seed, hash)
        self._attach(self._new_store(params, path, overwrite))

    create = creator(
        __init__,
        """Create an empty filter in a new state file (memory-mapped); FileExistsError if path
        exists, unless overwrite is True.""",
    )

    @classmethod
    def with_shape(
        cls,
        capacity: int,
        *,
        groups: int,
        nbits: int,
        k1: int,
        k2: int,
        ratio: int,
        query: str = "all",
        seed: int = 0,
        hash: str = DEFAULT_HASH,
    ) -> MultiDimensionalBloomFilter:
        """An in-memory filter of exactly this shape (the paper's experiments: S, N, k1, k2, r);
        its error_rate is the predicted rate at capacity."""
        size = sizing.MDBFSize(
            _int("groups", groups, 1, sizing.MAX_GROUPS),
            _int("nbits", nbits, 1, MAX_BITS),
            nbits // _int("ratio", ratio, 1, MAX_BITS),
            _int("k1", k1, 0, MAX_K),
            _int("k2", k2, 0, MAX_K),
            ratio,
        )
        if size.k < 1 or (size.k2 and size.n2 < 1):
            raise ConfigError(f"k1 + k2 must be >= 1 and V2 (nbits // ratio) needs bits: {size}")
        query = sizing.check_query(query)
        _int("capacity", capacity, 1, MAX_BITS)
        rate = sizing.error_rate(capacity, size, query)
        # Kept inside (0, 1) so that a saved copy opens again: the prediction can underflow to 0
        # (many groups) or reach 1 (a tiny filter over capacity).
        rate = min(max(rate, sys.float_info.min), math.nextafter(1.0, 0.0))
        params = _params(size, capacity, rate, query, seed, hash)
        return cls._in_memory(params)

    @staticmethod
    def _check_header(header: format.Header, where: str) -> None:
        check_header(header, where)

    @staticmethod
    def _data_bytes(params: dict[str, Any]) -> int:
        return data_bytes(params)

    @staticmethod
    def _shape(params: dict[str, Any]) -> tuple[int, ...]:
        shape = ("groups", "n1", "n2", "k1", "k2")
        return (*(params[f] for f in shape), RULES[params["query"]])

    def _attach(self, store: BufferStore) -> None:
        if store.params()["query"] == "any":
            _warn_any()
        super()._attach(store)

    @property
    def size(self) -> sizing.MDBFSize:
        """The shape: groups, n1, n2, k1, k2, ratio."""
        p = self._live_store().params()
        return sizing.MDBFSize(p["groups"], p["n1"], p["n2"], p["k1"], p["k2"], p["ratio"])

    @property
    def query(self) -> str:
        return str(self._live_store().params()["query"])

    def stats(self) -> FilterStats:
        """Capacity, count, bits and error rates (predicted at the current count); O(1)."""
        params = self._live_store().params()
        size = self.size
        return FilterStats(
            kind="mdbf",
            capacity=params["capacity"],
            count=len(self),
            bits=size.bits,
            error_rate=params["error_rate"],
            estimated_error_rate=sizing.error_rate(len(self), size, params["query"]),
            details={
                "groups": size.groups,
                "n1": size.n1,
                "n2": size.n2,
                "k1": size.k1,
                "k2": size.k2,
                "ratio": size.ratio,
                "query": params["query"],
                "likely_dropped": dropped_while_filling(
                    lambda n: sizing.error_rate(n, size, params["query"]),
                    len(self),
                    128 if len(self) > params["capacity"] else 16,
                ),
                **self._store_details(params),
            },
        )

    def _repr_fields(self) -> str:
        s = self.size
        return (
            f"S={s.groups} N={s.n1} N2={s.n2} k1={s.k1} k2={s.k2} query={self.query} "
            f"count={len(self)}"
        )


def _int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{name} must be an int in [{lo}, {hi}], not {value!r}")
    return value


def _sized_params(
    capacity: object,
    error_rate: object,
    groups: object,
    k: object,
    ratio: object,
    query: object,
    seed: object,
    hash: object,
) -> dict[str, Any]:
    capacity, rate = check_target(capacity, error_rate)
    query = sizing.check_query(query)
    size = sizing.size_mdbf(
        capacity,
        rate,
        query,
        groups=groups,  # type: ignore[arg-type]  # checked by size_mdbf
        k=k,  # type: ignore[arg-type]
        ratio=ratio,  # type: ignore[arg-type]
    )
    return _params(size, capacity, rate, query, seed, hash)


def _params(
    size: sizing.MDBFSize, capacity: int, rate: float, query: str, seed: object, hash: object
) -> dict[str, Any]:
    check_hash(hash)
    return {
        "kind": "mdbf",
        "groups": size.groups,
        "n1": size.n1,
        "n2": size.n2,
        "k1": size.k1,
        "k2": size.k2,
        "ratio": size.ratio,
        "query": query,
        "seed": check_seed(seed),
        "hash": hash,
        "capacity": capacity,
        "error_rate": float(rate),
    }


def data_bytes(params: dict[str, Any]) -> int:
    """Bytes of data: per group, V1 then V2, each rounded up to whole bytes (csrc/mdbf.h)."""
    n1, n2 = int(params["n1"]), int(params["n2"])
    return int(params["groups"]) * ((n1 + 7) // 8 + (n2 + 7) // 8)


def check_header(header: format.Header, where: str) -> None:
    """A state file's params must describe a multi-dimensional filter this code can probe."""
    params = stored_params(
        header,
        where,
        "mdbf",
        "an MDBF",
        groups=int,
        n1=int,
        n2=int,
        k1=int,
        k2=int,
        ratio=int,
        seed=int,
        capacity=int,
        query=str,
        hash=str,
    )
    if params["query"] not in RULES:
        raise FormatError(f"{where}: unknown query rule {params['query']!r}")
    g, n1, n2, k1, k2, r = (params[f] for f in ("groups", "n1", "n2", "k1", "k2", "ratio"))
    rate = params["error_rate"]
    if (
        not 1 <= g <= sizing.MAX_GROUPS
        or not 0 <= k1 <= MAX_K
        or not 0 <= k2 <= MAX_K
        or k1 + k2 < 1
        or not 1 <= n1 <= MAX_BITS
        or not 1 <= r <= n1
        or n2 != n1 // r
        or (k2 and n2 < 1)
        or params["capacity"] < 1
        or not 0.0 < rate < 1.0
        or math.isnan(rate)
    ):
        raise FormatError(f"{where}: invalid filter shape or parameters {params}")
    if header.data_length != data_bytes(params):
        raise FormatError(f"{where}: data length {header.data_length} does not match its shape")
    if header.count > g * (n1 + n2):  # every new key sets at least one bit
        raise FormatError(f"{where}: corrupted count {header.count}")
