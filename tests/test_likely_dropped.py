"""A Bloom filter filled past its capacity says how many new URLs it likely dropped.

The estimate (bloom/sizing.py: dropped_while_filling) comes from the formula alone, no bits read;
here it meets the drop measured on the development set's distinct URLs: each filter, sized far
too small, is offered every distinct URL once, and what it did not call new it dropped.
Tolerance: 10% of the measured drop, plus 4 standard deviations of a Poisson count (a drop of a
few dozen URLs is noise around its expectation). Measured on this set: within 5% (blocked,
7.6x over capacity) and 2% (standard) of drops from 63,000 to 515,000 URLs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import urlseen
from cli_helpers import dedup, summary
from conftest import require_dev_urls_path
from urlseen.bloom import sizing


def _close_enough(estimate: float, measured: int) -> bool:
    return abs(estimate - measured) <= 0.1 * measured + 4 * math.sqrt(max(measured, 1)) + 2


def test_a_constant_rate_drops_rate_over_one_minus_rate_per_take() -> None:
    # At a fixed rate p a filter takes a share 1 - p of what it is offered: D (1 - p) = count.
    for p in (0.0, 0.1, 0.5, 0.9):
        got = sizing.dropped_while_filling(lambda _n, p=p: p, 10_000)
        assert got == pytest.approx(10_000 * p / (1 - p), rel=1e-6)


def test_below_capacity_the_estimate_is_about_the_error_rate_times_the_count() -> None:
    size = sizing.size_filter(1_000_000, 1e-3, "standard")
    got = sizing.likely_dropped("standard", size.nbits, size.k, 1_000_000, 1_000_000)
    # The rate climbs to 1e-3 at capacity: the average over the fill is a fraction of it.
    assert 10 < got < 1_000_000 * 1e-3


@pytest.mark.parametrize(
    ("layout", "capacity", "error_rate"),
    [
        ("blocked", 100_000, 1e-6),  # 7.6x over capacity
        ("blocked", 300_000, 1e-3),
        ("standard", 100_000, 1e-6),  # saturated: half the distinct URLs dropped
        ("standard", 300_000, 1e-3),
        ("blocked", 500_000, 1e-6),  # 2x over: a few dozen
    ],
)
def test_the_estimate_meets_the_measured_drop_on_real_urls(
    dev_urls: list[str], layout: str, capacity: int, error_rate: float
) -> None:
    seen = urlseen.BloomFilter(capacity=capacity, error_rate=error_rate, layout=layout)
    new = sum(
        sum(seen.add_many(dev_urls[i : i + 100_000])) for i in range(0, len(dev_urls), 100_000)
    )
    measured = len(dev_urls) - new
    estimate = seen.stats().details["likely_dropped"]
    assert measured > 0, "the filter was meant to be over capacity"
    assert _close_enough(estimate, measured), (layout, capacity, estimate, measured)


def test_the_cli_warning_says_how_many_new_urls_were_likely_dropped(tmp_path: Path) -> None:
    """`--capacity 100000` on the dev file: the warning's number is within 10% of the drop
    measured against a run with room for every URL."""
    path = require_dev_urls_path()
    full = summary(dedup(path, "--json", "--capacity", "1e7", "-o", tmp_path / "all.txt"))
    small = summary(dedup(path, "--json", "--capacity", "100000", "-o", tmp_path / "tight.txt"))
    text = dedup(path, "--capacity", "100000", "-o", tmp_path / "tight2.txt")
    assert full["likely_dropped"] < 5  # 10M capacity, 1e-6
    measured = full["new"] - small["new"]
    assert measured > 100_000
    assert _close_enough(small["likely_dropped"], measured), (small["likely_dropped"], measured)
    warning = [line for line in text.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1, text.stderr
    said = int(warning[0].split("~", 1)[1].split()[0].replace(",", ""))
    assert said == round(small["likely_dropped"])
    assert "likely dropped as seen" in warning[0] and "--capacity" in warning[0]


def test_a_shared_filter_reports_its_likely_drop_too(
    dev_urls: list[str], redis_url: str, redis_name: str
) -> None:
    """The same estimate from a Bloom filter in Redis, which every client's stats() reads."""
    urls = dev_urls[:200_000]
    shared = urlseen.RedisBloomFilter(redis_url, redis_name, capacity=20_000, error_rate=1e-3)
    with shared:
        new = sum(sum(shared.add_many(urls[i : i + 10_000])) for i in range(0, len(urls), 10_000))
        estimate = shared.stats().details["likely_dropped"]
    measured = len(urls) - new
    assert measured > 10_000
    assert _close_enough(estimate, measured), (estimate, measured)
