"""The dynamic splittable Bloom filter's sizing, against a table of examples worked out by hand
(exact leaf capacity, best integer k, first leaves for 1e9 URLs)."""

from __future__ import annotations

import pytest

from urlseen import ConfigError
from urlseen.bloom.sizing import standard_error_rate
from urlseen.splittable.sizing import size_splittable


@pytest.mark.parametrize(
    "leaf_bits, error_rate, k, leaf_capacity, first_leaves",
    [
        (2**23, 1e-3, 10, 583_448, 1_714),
        (2**27, 1e-4, 13, 7_000_367, 143),
        (2**27, 1e-6, 20, 4_667_585, 215),
        (2**30, 1e-4, 13, 56_002_939, 18),
    ],
)
def test_the_worked_examples(leaf_bits, error_rate, k, leaf_capacity, first_leaves):
    size = size_splittable(10**9, leaf_bits, error_rate)
    assert (size.k, size.leaf_capacity, size.first_leaves) == (k, leaf_capacity, first_leaves)


@pytest.mark.parametrize(
    "leaf_bits, error_rate", [(2**20, 1e-2), (2**23, 1e-3), (2**27, 1e-6), (10**6 + 7, 3e-4)]
)
def test_leaf_capacity_is_the_largest_load_within_the_error_rate(leaf_bits, error_rate):
    size = size_splittable(1000, leaf_bits, error_rate)
    assert standard_error_rate(size.leaf_capacity, leaf_bits, size.k) <= error_rate
    assert standard_error_rate(size.leaf_capacity + 1, leaf_bits, size.k) > error_rate


@pytest.mark.parametrize(
    "capacity, leaf_bits, error_rate",
    [(0, 2**20, 1e-3), (10, 2**33, 1e-3), (10, 2**20, 0.0), (10, 2**20, 1.5), (10, 8, 0.1)],
)
def test_bad_parameters_are_refused(capacity, leaf_bits, error_rate):
    with pytest.raises(ConfigError):
        size_splittable(capacity, leaf_bits, error_rate)
