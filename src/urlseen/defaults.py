"""Every default a new filter takes when its caller gives none, in one place: the library's
constructors, `urlseen.kinds` (and through it the CLI, Scrapy and Crawlee) read them here, so
one kind never gets two answers. A leaf module: the algorithm wings import it without
importing the kinds table that imports them."""

from __future__ import annotations

CAPACITY = 10_000_000
"""Distinct URLs a front end plans for when it is given no capacity."""

BLOOM_ERROR_RATE = 1e-6
"""Bloom filters that cannot tell a drop (bloom, mdbf, rotating, in memory, a file or Redis):
about one new URL in a million answered seen."""

EXACT_ERROR_RATE = 1e-3
"""Filters whose error rate costs time, not URLs: the exact filter's counting filter (a false
positive only sends a URL to the library) and the splittable filter's leaves, whose rate holds
however far the crawl grows."""

SIMILAR_ERROR_RATE = 0.01
"""The similarity filter, lossy by design."""

ERROR_RATE: dict[str, float | None] = {
    "bloom": BLOOM_ERROR_RATE,
    "exact": EXACT_ERROR_RATE,
    "library": None,  # exact by construction: no rate to choose
    "dsbf": EXACT_ERROR_RATE,
    "mdbf": BLOOM_ERROR_RATE,
    "rotating": BLOOM_ERROR_RATE,
    "similar": SIMILAR_ERROR_RATE,
}
"""The default error rate of each kind, by the kind's name in `urlseen.kinds.KINDS`."""
