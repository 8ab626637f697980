"""Sizing of the Bloom family: bits (or counters) and hash count from (capacity, error_rate).

Pure Python, no filter imports: it is also the oracle the tests check measured rates against.
Formulas: for the standard layout Bloom's, in their exact form for an integer k (the closed
form assumes a real k and overstates the capacity); for the blocked layout, Putze, Sanders and
Singler, "Cache-, hash- and space-efficient Bloom filters" (2007): keys per block are
Poisson(n / blocks), and a query fails only in its own block.

The counting filter (the exact filter's counters) is sized by the same formulas with counters
for bits (size_counting), in its own layouts (choose_counter_layout): its blocked layout keeps
a key's counters in one 128-byte block (csrc/counting.h), one memory round trip per new key
instead of k, at more counters for the same error rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from urlseen import defaults
from urlseen._frozen import Frozen
from urlseen.errors import ConfigError

# The exact filter's cache of hot fingerprints, in entries (4 MiB; measured by
# benchmarks/exact/exact.py). Here, not in exact/, so that the kinds table can show it without
# importing the exact filter (and SQLite).
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
# `urlseen dedup` (10M URLs at 1e-6), sized at every start, where the search would be a
# visible share of the start-up (measured by benchmarks/tools/callgrind_startup.py).
# tests/test_sizing_memo.py compares each entry with the search, so an entry cannot drift.
# The second entry is the first layer of the in-memory default (bloom/growing.py: START_CAPACITY
# keys at half the rate), which is what a `urlseen dedup` without --state sizes.
KNOWN_BLOCKED: dict[tuple[int, float], tuple[int, int]] = {
    (defaults.CAPACITY, defaults.BLOOM_ERROR_RATE): (752_207, 16),
    (1 << 18, defaults.BLOOM_ERROR_RATE / 2): (21_284, 17),
}


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


def dropped_while_filling(rate_at: Callable[[float], float], count: int, steps: int = 128) -> float:
    """Distinct keys a filter most likely answered "seen" wrongly while it took `count` keys.

    A key answered seen wrongly has all its bits set already: it leaves the filter as inserting
    it would have. So after D distinct keys were offered the filter is the one the formula
    describes for D keys (rate_at(D), D not count), and of those it took the integral of
    1 - rate_at(x) over x in [0, D]. The D whose integral is `count` (trapezoids of count/steps,
    growing 5% a step past count, where a filter far over capacity needs many offers a take)
    less count is the estimate: ~rate x count below capacity, most new keys far past it.
    """
    if count <= 0:
        return 0.0
    step = count / steps
    offered, taken, kept = 0.0, 0.0, 1.0 - rate_at(0.0)
    while True:
        kept_next = max(1.0 - rate_at(offered + step), 0.0)
        gain = step * (kept + kept_next) / 2.0
        if taken + gain >= count or kept_next < 1e-9:  # 1e-9: saturated, no key gets in
            return offered + step * min((count - taken) / gain, 1.0) - count if gain else offered
        offered, taken, kept = offered + step, taken + gain, kept_next
        if offered >= count:
            step *= 1.05


def likely_dropped(size_layout: str, nbits: int, k: int, count: int, capacity: int) -> float:
    """New keys a Bloom filter of this shape most likely dropped as seen on its way to count;
    up to capacity, where that is at most the error rate x count, in 16 steps (~1 ms)."""
    steps = 128 if count > capacity else 16
    rate = error_rate_at
    return dropped_while_filling(lambda c: rate(size_layout, nbits, k, round(c)), count, steps)


# -- counting filters -------------------------------------------------------------------------


class CountingSize(Frozen):
    """A sized counting filter: m counters, k per key, the filter stage's rate at capacity."""

    __slots__ = ("ncounters", "k", "error_rate_at_capacity")  # noqa: RUF023
    ncounters: int
    k: int
    error_rate_at_capacity: float

    def __init__(self, ncounters: int, k: int, error_rate_at_capacity: float) -> None:
        self._init(ncounters, k, error_rate_at_capacity)


def size_counting(
    capacity: object, error_rate: object, k: object = None, counters_per_key: object = None
) -> CountingSize:
    """Counters and k for a counting filter: the standard formulas with counters for bits, or
    explicit k and/or m / n (the IMP-CBFilter paper's experiment: k = 8, m / n = 20)."""
    capacity, error_rate = check_target(capacity, error_rate)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K):
        raise ConfigError(f"k must be an int in [1, {MAX_K}], not {k!r}")
    if counters_per_key is not None:
        if isinstance(counters_per_key, bool) or not isinstance(counters_per_key, (int, float)):
            raise ConfigError(f"counters_per_key must be a number, not {counters_per_key!r}")
        if not 1 <= counters_per_key <= 1024:
            raise ConfigError(f"counters_per_key must be in [1, 1024], not {counters_per_key!r}")
        m = math.ceil(counters_per_key * capacity)
        kk = k if k is not None else max(1, min(MAX_K, round(counters_per_key * math.log(2))))
    else:
        std = size_standard(capacity, error_rate)
        m, kk = std.nbits, std.k
        if k is not None and k != kk:  # keep k, find the m that meets the rate with it
            inv = -math.expm1(math.log1p(-(error_rate ** (1.0 / k))) / (k * capacity))
            m, kk = math.ceil(1.0 / inv), k
    if m > MAX_BITS:
        raise ConfigError(f"capacity {capacity} needs {m} counters, more than {MAX_BITS}")
    return CountingSize(m, kk, standard_error_rate(capacity, m, kk))


COUNTER_LAYOUTS = {"standard": 0, "blocked": 1}  # the C core's layout codes
COUNTER_BLOCK_BYTES = 128  # US_COUNTER_BLOCK_BYTES
AUTO_BLOCKED_COST = 1.25  # layout="auto": blocked if it needs at most this many more counters


def block_counters(counter_bits: int) -> int:
    """Counters per block of the counting filter's blocked layout: 512, 256 or 128."""
    return COUNTER_BLOCK_BYTES * 8 // counter_bits


def choose_counter_layout(
    layout: object,
    capacity: int,
    error_rate: float,
    counter_bits: int,
    standard: tuple[int, int],
    *,
    explicit: bool,
) -> tuple[str, int, int]:
    """(layout, m, k) of a counting filter for a layout argument ("standard", "blocked" or
    "auto"), given the standard layout's (m, k). An explicit sizing (k or counters per key
    given) keeps its k and m, rounded up to whole blocks if blocked; "auto" keeps it standard."""
    if layout not in ("standard", "blocked", "auto"):
        raise ConfigError(f"layout must be 'standard', 'blocked' or 'auto', not {layout!r}")
    if layout == "standard" or (layout == "auto" and explicit):
        return "standard", *standard
    if explicit:
        m, k = round_to_blocks(standard[0], counter_bits), standard[1]
    else:
        m, k = size_counting_blocked(capacity, error_rate, counter_bits)
    if layout == "auto" and m > AUTO_BLOCKED_COST * standard[0]:
        return "standard", *standard
    if m > MAX_BITS:
        raise ConfigError(f"capacity {capacity} needs {m} counters, more than {MAX_BITS}")
    return "blocked", m, k


def _counting_rate_at_load(load: float, k: int, per_block: int) -> float:
    """False-positive rate of the counting blocked layout when blocks hold `load` keys on
    average: a block holding i keys (Poisson) has each counter still 0 with probability
    (1 - 1/B)^(k i) (each key's k places drawn with repeats, as the C code does)."""
    miss = math.log1p(-1.0 / per_block) * k
    term = math.exp(-load)  # Poisson(0)
    total, i = 0.0, 0
    stop = load + 8.0 * math.sqrt(load) + 8.0
    while i <= stop:
        total += term * (-math.expm1(miss * i)) ** k
        i += 1
        term *= load / i
    return total


def counting_blocked_error_rate(n: float, m: int, k: int, counter_bits: int) -> float:
    """The counting blocked layout's false-positive rate with n keys in m counters."""
    if n <= 0:
        return 0.0
    per_block = block_counters(counter_bits)
    return _counting_rate_at_load(n * per_block / m, k, per_block)


def _counting_max_load(error_rate: float, k: int, per_block: int) -> float:
    """The highest mean load per block (keys) at which k counters a key meet error_rate."""
    low, high = 0.0, float(per_block)  # rate(0) is 0; rate(B) is far above any target
    for _ in range(30):
        mid = (low + high) / 2
        if _counting_rate_at_load(mid, k, per_block) <= error_rate:
            low = mid
        else:
            high = mid
    return low


# (error_rate, counter_bits) -> (load, k) that search_counting_load answers: the exact filter's
# counters at their defaults, sized at every start of `urlseen dedup --filter exact` (~120 rate
# evaluations otherwise). tests/test_sizing_memo.py compares each entry with the search.
KNOWN_COUNTING_LOADS: dict[tuple[float, int], tuple[float, int]] = {
    (defaults.EXACT_ERROR_RATE, 4): (15.45190715789795, 9),
    (defaults.EXACT_ERROR_RATE, 8): (6.831444025039673, 8),
}


@lru_cache(maxsize=64)
def _counting_best_load(error_rate: float, counter_bits: int) -> tuple[float, int]:
    """search_counting_load's answer: a known one, else the search's."""
    known = KNOWN_COUNTING_LOADS.get((error_rate, counter_bits))
    return known if known is not None else search_counting_load(error_rate, counter_bits)


def search_counting_load(error_rate: float, counter_bits: int) -> tuple[float, int]:
    """The highest mean load per block that meets error_rate, and its k: the load is
    unimodal in k, so k walks from the standard layout's optimum while it gains."""
    per_block = block_counters(counter_bits)
    k = min(64, max(1, round(-math.log2(error_rate))))
    best = _counting_max_load(error_rate, k, per_block)
    for step in (-1, 1):
        while 1 <= k + step <= 64:
            load = _counting_max_load(error_rate, k + step, per_block)
            if load <= best:
                break
            best, k = load, k + step
    return best, k


def size_counting_blocked(capacity: int, error_rate: float, counter_bits: int) -> tuple[int, int]:
    """(m, k) of the counting blocked layout for capacity keys at error_rate: m a multiple of
    the block."""
    load, k = _counting_best_load(float(error_rate), counter_bits)
    if load <= 0:
        raise ConfigError(f"error_rate {error_rate} is out of the blocked layout's reach")
    blocks = max(1, math.ceil(capacity / load))
    return blocks * block_counters(counter_bits), k


def round_to_blocks(m: int, counter_bits: int) -> int:
    """m counters rounded up to whole blocks (an explicit sizing in the blocked layout)."""
    per_block = block_counters(counter_bits)
    return -(-m // per_block) * per_block
