"""Bloom-filter sizing: bits and hash count from (capacity, error_rate), for both layouts.

Pure Python, no urlseen imports: it is also the oracle the tests check measured rates against.
Formulas: for the standard layout Bloom's, in their exact form for an integer k (the closed
form assumes a real k and overstates the capacity); for the blocked layout, Putze, Sanders and
Singler, "Cache-, hash- and space-efficient Bloom filters" (2007): keys per block are
Poisson(n / blocks), and a query fails only in its own block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from urlseen._frozen import Frozen
from urlseen.errors import ConfigError

# The exact filter's cache of hot fingerprints, in entries. 4 MiB: on the whole dev file it
# leaves 0.0105 library look-ups per URL (EXACT.md, part c). Here, not in exact/filter.py, so
# that the kinds table can show it without importing the exact filter (and SQLite).
DEFAULT_CACHE_ENTRIES = 1 << 17

BLOCK_BITS = 512
MAX_K = 64
MAX_BITS = 1 << 46  # 8 TiB of bits: far beyond one machine, small enough to catch a typo
LAYOUTS = ("blocked", "standard")


class BloomSize(Frozen):
    """A sized filter: nbits bits, k probes, and the false-positive rate at capacity."""

    # the fields, in order (not sorted): eq, hash, repr and __init__ follow it
    __slots__ = ("nbits", "k", "layout", "error_rate_at_capacity")  # noqa: RUF023
    nbits: int
    k: int
    layout: str
    error_rate_at_capacity: float

    def __init__(self, nbits: int, k: int, layout: str, error_rate_at_capacity: float) -> None:
        self._init(nbits, k, layout, error_rate_at_capacity)

    @property
    def nbytes(self) -> int:
        return (self.nbits + 7) // 8


def standard_error_rate(n: float, m: int, k: int) -> float:
    """(1 - (1 - 1/m)^(k n))^k: the false-positive rate after n distinct insertions."""
    if n <= 0:
        return 0.0
    zero = math.exp(k * n * math.log1p(-1.0 / m)) if m > 1 else 0.0
    return (1.0 - zero) ** k


def standard_capacity(m: int, k: int, error_rate: float) -> int:
    """The largest n whose false-positive rate stays at or below error_rate p:
    floor(-(m/k) ln(1 - p^(1/k))), exact for an integer k (the closed form m (ln 2)^2 / ln(1/p)
    assumes a real k and overshoots)."""
    return math.floor(-(m / k) * math.log1p(-(error_rate ** (1.0 / k))))


def _poisson_terms(lam: float) -> range:
    spread = 12.0 * math.sqrt(lam) + 40.0
    return range(max(0, int(lam - spread)), int(lam + spread) + 1)


def blocked_error_rate(n: float, nblocks: int, k: int) -> float:
    """False-positive rate of a blocked filter: k independent bits in one 512-bit block per key.

    A block holding j keys has each bit set with probability 1 - (1 - 1/512)^(j k), so it
    answers a foreign query positively with probability that to the power k; j is Poisson with
    mean n / nblocks.
    """
    if n <= 0:
        return 0.0
    lam = n / nblocks
    log_lam = math.log(lam)
    keep = k * math.log1p(-1.0 / BLOCK_BITS)
    total = 0.0
    for j in _poisson_terms(lam):
        weight = math.exp(j * log_lam - lam - math.lgamma(j + 1))
        total += weight * (-math.expm1(j * keep)) ** k
    return total


def check_target(capacity: object, error_rate: object) -> tuple[int, float]:
    """Validate (capacity, error_rate); ConfigError names the bad argument and value."""
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise ConfigError(f"capacity must be a positive int, not {capacity!r}")
    if capacity < 1:
        raise ConfigError(f"capacity must be >= 1, not {capacity}")
    if capacity > MAX_BITS:  # every key takes at least a bit (and floats must hold it)
        raise ConfigError(
            f"capacity {capacity} is more than any filter can hold (at most {MAX_BITS} bits); "
            "use a splittable or distributed filter"
        )
    if isinstance(error_rate, bool) or not isinstance(error_rate, (int, float)):
        raise ConfigError(f"error_rate must be a float in (0, 1), not {error_rate!r}")
    rate = float(error_rate)
    if not 0.0 < rate < 1.0 or math.isnan(rate):
        raise ConfigError(f"error_rate must be in (0, 1), not {error_rate!r}")
    if rate < 2.0**-MAX_K:
        raise ConfigError(f"error_rate {rate!r} needs more than {MAX_K} probes; use >= 1e-18")
    return capacity, rate


def _candidate_ks(error_rate: float, spread: int) -> range:
    k_opt = -math.log2(error_rate)
    return range(max(1, math.floor(k_opt) - spread), min(MAX_K, math.ceil(k_opt) + spread) + 1)


def smallest(predicate_ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """Smallest x in [lo, hi] with predicate_ok(x), which is monotone (False..False, True..)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate_ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@lru_cache(maxsize=256)
def size_standard(capacity: int, error_rate: float) -> BloomSize:
    """Smallest m (a multiple of 64) and its k such that the exact rate at capacity <= target.

    Solving (1 - (1 - 1/m)^(k n))^k <= p for m gives m >= 1 / -expm1(log1p(-p^(1/k)) / (k n)).
    """
    best: BloomSize | None = None
    for k in _candidate_ks(error_rate, 1):
        inv = -math.expm1(math.log1p(-(error_rate ** (1.0 / k))) / (k * capacity))
        m = math.ceil(1.0 / inv) if inv > 0 else MAX_BITS + 1
        if m > MAX_BITS:  # refused at once (the guard below would crawl in steps of 64)
            raise ConfigError(
                f"capacity {capacity} at error_rate {error_rate} needs "
                f"{m / 8 / 2**40:.3g} TiB, more than the {MAX_BITS // 8 // 2**40} TiB a "
                "filter may take; use a splittable or distributed filter"
            )
        m = -(-m // 64) * 64
        while standard_error_rate(capacity, m, k) > error_rate:  # guard float rounding
            m += 64
        if best is None or m < best.nbits:
            best = BloomSize(m, k, "standard", standard_error_rate(capacity, m, k))
    assert best is not None
    return best


# (capacity, error_rate) -> (blocks, k) that search_blocked answers: the default filter of
# `urlseen dedup` (10M URLs at 1e-6), sized at every start, where the search is 11.6M of ~271M
# instructions (benchmarks/callgrind_startup.py). tests/test_sizing_memo.py compares each entry
# with the search, so an entry cannot drift from it.
KNOWN_BLOCKED: dict[tuple[int, float], tuple[int, int]] = {(10_000_000, 1e-6): (752_207, 16)}


@lru_cache(maxsize=256)
def size_blocked(capacity: int, error_rate: float) -> BloomSize:
    """The blocked layout's size: a known answer, else search_blocked's. The rate at capacity
    is always computed here (one evaluation), so it is this platform's own float."""
    known = KNOWN_BLOCKED.get((capacity, error_rate))
    blocks, k = known if known is not None else search_blocked(capacity, error_rate)
    return BloomSize(blocks * BLOCK_BITS, k, "blocked", blocked_error_rate(capacity, blocks, k))


def search_blocked(capacity: int, error_rate: float) -> tuple[int, int]:
    """(blocks, k): fewest 512-bit blocks, over a range of k, keeping the blocked rate at
    capacity <= target (ties: the smallest k).

    The k with the lowest rate at the standard layout's size is searched first (it is nearly
    always the winner); every other k is first asked whether it fits in the best size so far at
    all, which one rate evaluation answers (the rate falls as blocks grow), so most ks cost one
    evaluation instead of a search: it runs whenever a filter is sized for other values.
    """
    std_blocks = size_standard(capacity, error_rate).nbits // BLOCK_BITS + 1
    lo, hi = max(1, std_blocks // 2), std_blocks * 8
    ks = _candidate_ks(error_rate, 3)
    at_standard_size = {k: blocked_error_rate(capacity, std_blocks, k) for k in ks}
    best: tuple[int, int] | None = None  # (blocks, k)
    for k in sorted(ks, key=lambda k: (at_standard_size[k], k)):

        def fits(blocks: int, k: int = k) -> bool:
            return blocked_error_rate(capacity, blocks, k) <= error_rate

        top = hi if best is None else best[0]
        if not fits(top):
            continue  # this k needs more blocks than the best so far (or than a sane size)
        blocks = smallest(fits, min(lo, top), top)
        if best is None or (blocks, k) < best:
            best = (blocks, k)
    if best is None:
        raise ConfigError(f"error_rate {error_rate!r} is too low for the blocked layout")
    return best


def size_filter(capacity: object, error_rate: object, layout: object = "blocked") -> BloomSize:
    """Validate the user's parameters and size a filter; ConfigError names any bad value."""
    n, p = check_target(capacity, error_rate)
    if layout == "standard":
        size = size_standard(n, p)
    elif layout == "blocked":
        size = size_blocked(n, p)
    else:
        raise ConfigError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if size.nbits > MAX_BITS:
        raise ConfigError(
            f"capacity {n} at error_rate {p} needs {size.nbytes / 2**40:.1f} TiB; "
            "use a splittable or distributed filter"
        )
    return size


def estimate_count(nbits: int, k: int, ones: int) -> float:
    """Distinct keys that would set `ones` of nbits bits (Swamidass and Baldi 2007)."""
    if ones >= nbits:
        return math.inf
    return -(nbits / k) * math.log1p(-ones / nbits)


def error_rate_at(size_layout: str, nbits: int, k: int, count: int) -> float:
    """The false-positive rate a filter of this shape has after count distinct keys."""
    if size_layout == "blocked":
        return blocked_error_rate(count, nbits // BLOCK_BITS, k)
    return standard_error_rate(count, nbits, k)
