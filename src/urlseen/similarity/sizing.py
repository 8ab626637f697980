"""Sizing of the similarity filter: the patent's M, the exact-for-t-probes M, and N.

The patent takes only k (URLs to de-duplicate) and P (the desired rate) and leaves its two
formulas out of every public copy; both below are our reconstructions, not the patent's text:

- ``patent``: M = ⌈−k·ln P / (ln 2)²⌉, the standard Bloom size, which assumes log2(1/P)
  probes while the patent uses one per feature (4): at its design load the rate of random
  features is (1 − e^(−4k/M))^4, 1.36 % for P = 1 %.
- ``exact4``: M = ⌈−t·k / ln(1 − P^(1/t))⌉, exact for t probes per URL (t = 4 features):
  10.52·k bits at 1 %, 20.43·k at 0.1 %.

N, the modulus of the bit index, is M (``shared``), the largest prime <= M (``prime``), or
⌊M/t⌋ per feature region (``regions``: feature i owns bits [i·N, (i+1)·N)).
"""

from __future__ import annotations

import math

from urlseen.bloom.sizing import MAX_BITS, check_target
from urlseen.errors import ConfigError

SIZINGS = ("patent", "exact4")
INDEXES = ("shared", "prime", "regions")
# Deterministic Miller-Rabin bases for every n < 3.3e24 (Sorenson and Webster 2015).
_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)


def patent_bits(capacity: int, error_rate: float) -> int:
    """M = ⌈−k·ln P / (ln 2)²⌉ (the standard Bloom size: the patent's most plausible
    formula, since it takes exactly k and P)."""
    return math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)


def exact_bits(capacity: int, error_rate: float, probes: int) -> int:
    """M = ⌈−t·k / ln(1 − P^(1/t))⌉: the rate of t random probes per URL is P at k URLs."""
    return math.ceil(-probes * capacity / math.log1p(-(error_rate ** (1.0 / probes))))


def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin (exact for every n this module can be asked about)."""
    if n < 2:
        return False
    for p in _MR_BASES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in _MR_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def largest_prime_at_most(m: int) -> int:
    """The largest prime <= m (m >= 2); prime gaps below 2**46 are < 1,000, so this is quick."""
    if m < 2:
        raise ConfigError(f"no prime <= {m}")
    n = m
    while not is_prime(n):
        n -= 1
    return n


def size_features(
    capacity: object, error_rate: object, probes: int, sizing: str, index: str
) -> tuple[int, int]:
    """(M, N) for a per-feature filter of `probes` features.

    Raises:
        ConfigError: bad capacity or error_rate, unknown sizing or index, or a size too large.
    """
    n, p = check_target(capacity, error_rate)
    if sizing not in SIZINGS:
        raise ConfigError(f"sizing must be one of {', '.join(SIZINGS)}, not {sizing!r}")
    if index not in INDEXES:
        raise ConfigError(f"index must be one of {', '.join(INDEXES)}, not {index!r}")
    m = patent_bits(n, p) if sizing == "patent" else exact_bits(n, p, probes)
    m = max(m, 2 * probes)  # room for a prime, and >= 2 bits per region
    if m > MAX_BITS:
        raise ConfigError(f"capacity {n} at error_rate {p} needs {m} bits, more than {MAX_BITS}")
    if index == "shared":
        return m, m
    if index == "prime":
        return m, largest_prime_at_most(m)
    return m, m // probes


def random_feature_rate(count: int, nbits: int, modulus: int, probes: int, index: str) -> float:
    """The false-positive rate after `count` URLs if every feature value were new and random.

    Real features repeat (one site, a handful of depths), so the measured drop rate of new
    URLs is set by the data, not by this (measured by benchmarks/papers/similarity.py).
    """
    if count <= 0:
        return 0.0
    if index == "regions":
        return float((-math.expm1(-count / modulus)) ** probes)
    return float((-math.expm1(-probes * count / modulus)) ** probes)
