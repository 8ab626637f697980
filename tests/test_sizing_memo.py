"""The known blocked sizes (bloom/sizing.py's KNOWN_BLOCKED) are what the search answers."""

from __future__ import annotations

import pytest

from urlseen.bloom import sizing


@pytest.mark.parametrize(("capacity", "error_rate"), sorted(sizing.KNOWN_BLOCKED))
def test_known_blocked_size_is_the_searchs(capacity: int, error_rate: float) -> None:
    assert (
        sizing.search_blocked(capacity, error_rate) == sizing.KNOWN_BLOCKED[(capacity, error_rate)]
    )
    sizing.size_blocked.cache_clear()
    size = sizing.size_filter(capacity, error_rate, "blocked")
    blocks, k = sizing.KNOWN_BLOCKED[(capacity, error_rate)]
    assert (size.nbits, size.k, size.layout) == (blocks * sizing.BLOCK_BITS, k, "blocked")
    assert size.error_rate_at_capacity == sizing.blocked_error_rate(capacity, blocks, k)
    assert size.error_rate_at_capacity <= error_rate


def test_the_default_dedup_filter_is_known() -> None:
    """The entry is the one every `urlseen dedup` start needs: the bloom kind's defaults."""
    from urlseen.kinds import DEFAULT_CAPACITY, KINDS

    defaults = KINDS["bloom"].defaults()
    assert defaults["layout"] == "blocked"
    assert (DEFAULT_CAPACITY, KINDS["bloom"].error_rate) in sizing.KNOWN_BLOCKED


def test_the_in_memory_default_first_layer_is_known() -> None:
    """`urlseen dedup` without --state starts a growing filter: its first layer is sized at
    every start, so its size is a known one too."""
    from urlseen.bloom.growing import GrowingBloomFilter
    from urlseen.kinds import KINDS

    with GrowingBloomFilter(KINDS["bloom"].error_rate) as seen:
        first = seen._layers[0]
        assert (first.capacity, first.error_rate) in sizing.KNOWN_BLOCKED


@pytest.mark.parametrize(("error_rate", "counter_bits"), sorted(sizing.KNOWN_COUNTING_LOADS))
def test_known_counting_load_is_the_searchs(error_rate: float, counter_bits: int) -> None:
    known = sizing.KNOWN_COUNTING_LOADS[(error_rate, counter_bits)]
    assert sizing.search_counting_load(error_rate, counter_bits) == known


def test_the_exact_filters_default_counters_are_known() -> None:
    """The entry is the one every `urlseen dedup --filter exact` start needs."""
    from urlseen.exact.folder import Sizing
    from urlseen.kinds import KINDS

    default = (KINDS["exact"].error_rate, Sizing._field_defaults["counter_bits"])
    assert default in sizing.KNOWN_COUNTING_LOADS
