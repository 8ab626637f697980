"""Counting-filter sizing: counters and k for a target, or for an explicit k and/or m / n.

Apart from bloom/sizing.py because only the counting filter (the exact kind) needs it: its
dataclass is not made at every `urlseen dedup` start (benchmarks/callgrind_startup.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from urlseen.bloom.sizing import (
    MAX_BITS,
    MAX_K,
    check_target,
    size_standard,
    standard_error_rate,
)
from urlseen.errors import ConfigError


@dataclass(frozen=True)
class CountingSize:
    """A sized counting filter: m counters, k per key, the filter stage's rate at capacity."""

    ncounters: int
    k: int
    error_rate_at_capacity: float


def size_counting(
    capacity: int, error_rate: float, k: int | None = None, counters_per_key: float | None = None
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
