"""The counting filter's layouts, and the sizing of the blocked one (csrc/counting.h).

Why blocked: in the standard layout a new key's k counters are k cache misses in an array far
larger than the CPU cache (10 per new URL at the exact filter's defaults), the largest share of
`urlseen dedup --filter exact` after the hashing. The blocked layout keeps a key's counters in
one 128-byte block (two adjacent cache lines). Blocks fill unevenly (a block's load is
Poisson), so at the same memory its false-positive rate is higher; it is sized here to meet
the same target, which takes ~18% more counters at the exact filter's 1e-3.
"""

from __future__ import annotations

import functools
import math

from urlseen.bloom.sizing import MAX_BITS
from urlseen.errors import ConfigError

LAYOUTS = {"standard": 0, "blocked": 1}
BLOCK_BYTES = 128  # US_COUNTER_BLOCK_BYTES
AUTO_BLOCKED_COST = 1.25  # layout="auto": blocked if it needs at most this many more counters


def block_counters(counter_bits: int) -> int:
    """Counters per block: 512, 256 or 128."""
    return BLOCK_BYTES * 8 // counter_bits


def choose(
    layout: object,
    capacity: int,
    error_rate: float,
    counter_bits: int,
    standard: tuple[int, int],
    *,
    explicit: bool,
) -> tuple[str, int, int]:
    """(layout, m, k) for a layout argument ("standard", "blocked" or "auto"), given the
    standard layout's (m, k). An explicit sizing (k or counters per key given) keeps its k and
    m, rounded up to whole blocks if blocked; "auto" keeps it standard."""
    if layout not in ("standard", "blocked", "auto"):
        raise ConfigError(f"layout must be 'standard', 'blocked' or 'auto', not {layout!r}")
    if layout == "standard" or (layout == "auto" and explicit):
        return "standard", *standard
    if explicit:
        m, k = round_to_blocks(standard[0], counter_bits), standard[1]
    else:
        m, k = size_blocked(capacity, error_rate, counter_bits)
    if layout == "auto" and m > AUTO_BLOCKED_COST * standard[0]:
        return "standard", *standard
    if m > MAX_BITS:
        raise ConfigError(f"capacity {capacity} needs {m} counters, more than {MAX_BITS}")
    return "blocked", m, k


def _rate_at_load(load: float, k: int, per_block: int) -> float:
    """False-positive rate of the blocked layout when blocks hold `load` keys on average: a
    block holding i keys (Poisson) has each counter still 0 with probability
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


def blocked_error_rate(n: float, m: int, k: int, counter_bits: int) -> float:
    """The blocked layout's false-positive rate with n keys in m counters."""
    if n <= 0:
        return 0.0
    per_block = block_counters(counter_bits)
    return _rate_at_load(n * per_block / m, k, per_block)


def _max_load(error_rate: float, k: int, per_block: int) -> float:
    """The highest mean load per block (keys) at which k counters a key meet error_rate."""
    low, high = 0.0, float(per_block)  # rate(0) is 0; rate(B) is far above any target
    for _ in range(30):
        mid = (low + high) / 2
        if _rate_at_load(mid, k, per_block) <= error_rate:
            low = mid
        else:
            high = mid
    return low


@functools.lru_cache(maxsize=64)
def _best_load(error_rate: float, counter_bits: int) -> tuple[float, int]:
    """The highest mean load per block that meets error_rate, and its k: the load is
    unimodal in k, so k walks from the standard layout's optimum while it gains."""
    per_block = block_counters(counter_bits)
    k = min(64, max(1, round(-math.log2(error_rate))))
    best = _max_load(error_rate, k, per_block)
    for step in (-1, 1):
        while 1 <= k + step <= 64:
            load = _max_load(error_rate, k + step, per_block)
            if load <= best:
                break
            best, k = load, k + step
    return best, k


def size_blocked(capacity: int, error_rate: float, counter_bits: int) -> tuple[int, int]:
    """(m, k) of the blocked layout for capacity keys at error_rate: m a multiple of the block."""
    load, k = _best_load(float(error_rate), counter_bits)
    if load <= 0:
        raise ConfigError(f"error_rate {error_rate} is out of the blocked layout's reach")
    blocks = max(1, math.ceil(capacity / load))
    return blocks * block_counters(counter_bits), k


def round_to_blocks(m: int, counter_bits: int) -> int:
    """m counters rounded up to whole blocks (an explicit sizing in the blocked layout)."""
    per_block = block_counters(counter_bits)
    return -(-m // per_block) * per_block
