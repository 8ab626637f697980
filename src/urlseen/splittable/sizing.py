"""Splittable-filter sizing: k, a leaf's capacity and the first layer's leaves.

Apart from bloom/sizing.py because only the splittable filter needs it: its dataclass is
not made at every `urlseen dedup` start (benchmarks/callgrind_startup.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from urlseen.bloom.sizing import (
    BLOCK_BITS,
    MAX_K,
    blocked_error_rate,
    check_target,
    smallest,
    standard_capacity,
)
from urlseen.errors import ConfigError


@dataclass(frozen=True)
class SplittableSize:
    """A dynamic splittable Bloom filter's shape: k probes per leaf, the most URLs a leaf holds
    at the error rate (leaf_capacity: reaching it, a leaf splits), and the first layer's leaves
    for the expected URLs."""

    k: int
    leaf_capacity: int
    first_leaves: int


def size_splittable(
    capacity: int, leaf_bits: int, error_rate: float, layout: str = "standard"
) -> SplittableSize:
    """The shape of a splittable filter expecting `capacity` URLs in leaves of `leaf_bits` bits
    that each keep false-positive rate <= error_rate.

    k is floor or ceil of log2(1 / error_rate), whichever lets a leaf hold more URLs; the leaf
    capacity is the exact largest load within the rate (standard_capacity: never the closed
    form, which overshoots); first_leaves = ceil(capacity / leaf_capacity).

    For the blocked layout the leaf capacity is the largest count whose blocked false-positive
    rate stays <= error_rate (a blocked leaf holds fewer URLs than a standard one at the same
    rate), and k is searched a little wider, since the blocked optimum sits below
    log2(1 / error_rate).
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ConfigError(f"capacity (expected URLs) must be a positive int, not {capacity!r}")
    if (
        isinstance(leaf_bits, bool)
        or not isinstance(leaf_bits, int)
        or not 64 <= leaf_bits <= 1 << 32
    ):
        raise ConfigError(f"leaf_bits must be an int in [64, 2**32], not {leaf_bits!r}")
    check_target(capacity, error_rate)
    ideal_k = math.log2(1.0 / error_rate)
    if layout == "blocked":
        candidates = {
            min(MAX_K, max(1, k)) for k in range(math.floor(ideal_k) - 4, math.ceil(ideal_k) + 1)
        }

        def holds(k: int) -> int:
            top = standard_capacity(leaf_bits, k, error_rate)
            blocks = leaf_bits // BLOCK_BITS
            over = smallest(lambda n: blocked_error_rate(n, blocks, k) > error_rate, 1, top + 1)
            return over - 1

    else:
        candidates = {
            min(MAX_K, max(1, math.floor(ideal_k))),
            min(MAX_K, max(1, math.ceil(ideal_k))),
        }

        def holds(k: int) -> int:
            return standard_capacity(leaf_bits, k, error_rate)

    best = max(candidates, key=lambda k: (holds(k), -k))
    leaf_capacity = holds(best)
    if leaf_capacity < 1:
        raise ConfigError(
            f"a leaf of {leaf_bits} bits cannot hold one URL at error_rate {error_rate}"
        )
    return SplittableSize(best, leaf_capacity, -(-capacity // leaf_capacity))
