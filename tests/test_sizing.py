"""Bloom sizing (bloom/sizing.py): the blocked layout's pruned search gives exactly what a
search of every candidate k over the whole range gives."""

from __future__ import annotations

import pytest

from urlseen.bloom import sizing as _sizing


def every_k_searched(capacity: int, error_rate: float) -> tuple[int, int]:
    """(blocks, k): each candidate k binary-searched over [standard / 2, standard * 8] blocks;
    the fewest blocks win, ties to the smallest k."""
    std_blocks = _sizing.size_standard(capacity, error_rate).nbits // _sizing.BLOCK_BITS + 1
    best: tuple[int, int] | None = None
    for k in _sizing._candidate_ks(error_rate, 3):
        lo, hi = max(1, std_blocks // 2), std_blocks * 8
        if _sizing.blocked_error_rate(capacity, hi, k) > error_rate:
            continue
        while lo < hi:
            mid = (lo + hi) // 2
            if _sizing.blocked_error_rate(capacity, mid, k) <= error_rate:
                hi = mid
            else:
                lo = mid + 1
        if best is None or lo < best[0]:
            best = (lo, k)
    assert best is not None
    return best


@pytest.mark.parametrize("error_rate", [0.5, 0.1, 0.01, 0.003, 0.001, 1e-4, 1e-6])
@pytest.mark.parametrize("capacity", [1, 2, 7, 100, 1000, 12_345, 10**6, 10**7])
def test_blocked_sizing_matches_a_search_of_every_k(capacity: int, error_rate: float) -> None:
    _sizing.size_blocked.cache_clear()
    size = _sizing.size_filter(capacity, error_rate, "blocked")
    blocks, k = every_k_searched(capacity, error_rate)
    assert (size.nbits, size.k) == (blocks * _sizing.BLOCK_BITS, k)
    assert size.error_rate_at_capacity == _sizing.blocked_error_rate(capacity, blocks, k)
    assert size.error_rate_at_capacity <= error_rate
