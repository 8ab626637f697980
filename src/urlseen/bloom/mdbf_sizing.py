"""The multi-dimensional Bloom filter's formulas and its sizing from (capacity, error_rate).
Pure Python: also the oracle that tests and benchmarks compare measured rates to.

The formulas are our reconstruction (the paper's own is lost): one group of V1 (N bits, k1
probes) and V2 (N2 = N // r bits, k2 probes) answers a foreign key positively with probability
f_g = (1 - (1 - 1/N)^(k1 n))^k1 * (1 - (1 - 1/N2)^(k2 n))^k2 after n insertions. The S groups
hash independently, so QUERY_ALL errs with f_g^S and QUERY_ANY with 1 - (1 - f_g)^S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from urlseen.bloom.sizing import MAX_BITS, MAX_K, standard_error_rate
from urlseen.errors import ConfigError

MAX_GROUPS = 64  # the C core's limit (csrc/mdbf.h)
AUTO_MAX_GROUPS = 8  # sizing tries S = 1..8 unless told; more only adds hashing
QUERIES = ("all", "any")


@dataclass(frozen=True)
class MDBFSize:
    """S groups of (V1: n1 bits, k1 probes; V2: n2 bits, k2 probes); n2 = n1 // ratio."""

    groups: int
    n1: int
    n2: int
    k1: int
    k2: int
    ratio: int

    @property
    def bits(self) -> int:
        """Total memory in bits: S * (N + N2), the paper's "2S x a standard filter" corrected."""
        return self.groups * (self.n1 + self.n2)

    @property
    def k(self) -> int:
        return self.k1 + self.k2


def _vector_rate(n: float, bits: int, k: int) -> float:
    if k == 0:
        return 1.0
    if bits <= 0:
        return 1.0
    return standard_error_rate(n, bits, k)


def group_error_rate(n: float, n1: int, n2: int, k1: int, k2: int) -> float:
    """f_g: the chance that one group has every probed bit set for a key never inserted."""
    if n <= 0:
        return 0.0
    return _vector_rate(n, n1, k1) * _vector_rate(n, n2, k2)


def combine(f_g: float, groups: int, query: str) -> float:
    """The filter's false-positive rate from the per-group one, for the query rule."""
    if query == "all":
        return float(f_g**groups)
    return -math.expm1(groups * math.log1p(-f_g)) if f_g < 1.0 else 1.0


def error_rate(n: float, size: MDBFSize, query: str = "all") -> float:
    """Predicted false-positive rate after n distinct insertions."""
    f_g = group_error_rate(n, size.n1, size.n2, size.k1, size.k2)
    return combine(f_g, size.groups, query)


def best_k1(n: float, n1: int, n2: int, k: int) -> tuple[int, float]:
    """The k1 for a group of k probes: the one in 0..k with the least f_g."""
    best = (0, 2.0)
    for k1 in range(k + 1):
        if k - k1 > 0 and n2 <= 0:
            continue
        f = group_error_rate(n, n1, n2, k1, k - k1)
        if f < best[1]:
            best = (k1, f)
    return best


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{name} must be an int in [{lo}, {hi}], not {value!r}")
    return value


def check_query(query: object) -> str:
    if query not in QUERIES:
        raise ConfigError(f"query must be 'all' or 'any', not {query!r}")
    return str(query)


def _group_target(error_rate: float, groups: int, query: str) -> float:
    """Per-group rate that gives error_rate overall (inverse of combine)."""
    if query == "all":
        return float(error_rate ** (1.0 / groups))
    return -math.expm1(math.log1p(-error_rate) / groups)


def _smallest_n1(capacity: int, target: float, k: int, ratio: int) -> tuple[int, int] | None:
    """Smallest N (and its best k1) whose group meets target with k probes, or None."""

    def ok(n1: int) -> tuple[int, float]:
        return best_k1(capacity, n1, n1 // ratio, k)

    hi = max(64, ratio, math.ceil(capacity * k / math.log(2)))
    while ok(hi)[1] > target:
        hi *= 2
        if hi > MAX_BITS:
            return None
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid)[1] <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo, ok(lo)[0]


def size_mdbf(
    capacity: int,
    error_rate: float,
    query: str = "all",
    *,
    groups: int | None = None,
    k: int | None = None,
    ratio: int | None = None,
) -> MDBFSize:
    """The least-memory shape whose predicted rate at capacity is at most error_rate.

    Tries S = `groups` (or 1..8), per-group probes k = `k` (or all that can help) and, for each,
    the smallest N that meets the per-group target with the best k1 (best_k1); the shrink ratio
    r is `ratio`, or k itself as in the paper (N2 = N / k). Ties go to fewer groups, then fewer
    probes.
    """
    query = check_query(query)
    if groups is not None:
        _check_int("groups", groups, 1, MAX_GROUPS)
    if k is not None:
        _check_int("k", k, 1, MAX_K)
    if ratio is not None:
        _check_int("ratio", ratio, 1, 1 << 20)
    best: tuple[int, int, int, MDBFSize] | None = None
    for s in [groups] if groups is not None else range(1, AUTO_MAX_GROUPS + 1):
        target = _group_target(error_rate, s, query)
        k_hi = min(MAX_K, math.ceil(-math.log2(target)) + 3)
        for kk in [k] if k is not None else range(1, k_hi + 1):
            r = ratio if ratio is not None else kk
            found = _smallest_n1(capacity, target, kk, r)
            if found is None:
                continue
            n1, k1 = found
            size = MDBFSize(s, n1, n1 // r, k1, kk - k1, r)
            rank = (size.bits, s, kk, size)
            if best is None or rank[:3] < best[:3]:
                best = rank
    if best is None:
        raise ConfigError(
            f"no multi-dimensional filter of at most {MAX_BITS} bits per vector reaches "
            f"error_rate {error_rate} for capacity {capacity} with these settings"
        )
    return best[3]
