"""`urlseen info --redis URL --name NAME`: describe what Redis holds under that name (a
splittable filter with its tree, a Bloom filter, or a fingerprint library)."""

from __future__ import annotations

from typing import Any

import click

from urlseen.filters.base import FilterStats
from urlseen.filters.dsbf import SplittableBloomFilter
from urlseen.filters.redis_bloom import RedisBloomFilter
from urlseen.stores.redis_library import RedisLibrary, describe_redis_library


def describe_redis(url: str, name: str) -> dict[str, Any]:
    """Whichever urlseen structure Redis holds under name; UsageError if none."""
    if SplittableBloomFilter.exists(url, name):
        return describe_dsbf(url, name)
    if RedisBloomFilter.exists(url, name):
        return describe_bloom(url, name)
    if RedisLibrary.exists(url, name):
        return describe_redis_library(url, name)
    raise click.UsageError(f"no urlseen filter named {name!r} in {url}")


def _head(url: str, name: str, stats: FilterStats) -> dict[str, Any]:
    return {
        "redis": url,
        "name": name,
        "kind": stats.kind,
        "count": stats.count,
        "capacity": stats.capacity,
        "error_rate": stats.error_rate,
    }


def describe_bloom(url: str, name: str) -> dict[str, Any]:
    """Parameters, count and fill (BITCOUNT reads the bits on the server)."""
    seen = RedisBloomFilter(url, name)
    stats = seen.stats()
    return {
        **_head(url, name, stats),
        "estimated_error_rate": stats.estimated_error_rate,
        "nbits": seen.nbits,
        "k": seen.k,
        "layout": stats.details["layout"],
        "hash": stats.details["hash"],
        "fill": seen.popcount() / seen.nbits,
        "redis_bytes": seen.memory_usage(),
    }


def describe_dsbf(url: str, name: str) -> dict[str, Any]:
    """Parameters, totals, and every live leaf (id, depth, URLs, fill of u, state) as "tree"."""
    seen = SplittableBloomFilter(redis=url, name=name)
    stats = seen.stats()
    leaves = seen.leaves()
    d = stats.details
    return {
        **_head(url, name, stats),
        "worst_leaf_error_rate": stats.estimated_error_rate,
        **{key: d[key] for key in ("leaf_bits", "k", "u", "fanout", "layout", "first_leaves")},
        **{key: d[key] for key in ("leaves", "depth", "tree_version")},
        "mean_fill": sum(leaf["fill"] for leaf in leaves) / max(1, len(leaves)),
        "redis_bytes": seen.memory_usage(),
        "tree": leaves,
    }


def tree_lines(leaves: list[dict[str, Any]]) -> list[str]:
    """The leaves in tree order, indented by depth."""
    return [
        f"{'  ' * leaf['depth']}leaf {leaf['leaf']}: {leaf['count']:,} URLs, "
        f"{leaf['fill']:.0%} of u, {leaf['state']}"
        for leaf in leaves
    ]
