"""The known blocked sizes (filters/_sizing.py's KNOWN_BLOCKED) are what the search answers."""

from __future__ import annotations

import pytest

from urlseen.filters import _sizing


@pytest.mark.parametrize(("capacity", "error_rate"), sorted(_sizing.KNOWN_BLOCKED))
def test_known_blocked_size_is_the_searchs(capacity: int, error_rate: float) -> None:
    assert (
        _sizing.search_blocked(capacity, error_rate)
        == _sizing.KNOWN_BLOCKED[(capacity, error_rate)]
    )
    _sizing.size_blocked.cache_clear()
    size = _sizing.size_filter(capacity, error_rate, "blocked")
    blocks, k = _sizing.KNOWN_BLOCKED[(capacity, error_rate)]
    assert (size.nbits, size.k, size.layout) == (blocks * _sizing.BLOCK_BITS, k, "blocked")
    assert size.error_rate_at_capacity == _sizing.blocked_error_rate(capacity, blocks, k)
    assert size.error_rate_at_capacity <= error_rate


def test_the_default_dedup_filter_is_known() -> None:
    """The entry is the one every `urlseen dedup` start needs: the bloom kind's defaults."""
    from urlseen.kinds import DEFAULT_CAPACITY, KINDS

    defaults = KINDS["bloom"].defaults()
    assert defaults["layout"] == "blocked"
    assert (DEFAULT_CAPACITY, KINDS["bloom"].error_rate) in _sizing.KNOWN_BLOCKED
