"""`urlseen info --redis URL --name NAME` for a splittable filter: parameters and the tree."""

from __future__ import annotations

from typing import Any

from urlseen.filters.dsbf import SplittableBloomFilter


def describe_dsbf(url: str, name: str) -> dict[str, Any]:
    """Parameters, totals, and every live leaf (id, depth, URLs, fill of u, state)."""
    seen = SplittableBloomFilter(redis=url, name=name)
    stats = seen.stats()
    leaves = seen.leaves()
    d = stats.details
    return {
        "redis": url,
        "name": name,
        "kind": stats.kind,
        "count": stats.count,
        "capacity": stats.capacity,
        "error_rate": stats.error_rate,
        "worst_leaf_error_rate": stats.estimated_error_rate,
        "leaf_bits": d["leaf_bits"],
        "k": d["k"],
        "u": d["u"],
        "fanout": d["fanout"],
        "layout": d["layout"],
        "first_leaves": d["first_leaves"],
        "leaves": d["leaves"],
        "depth": d["depth"],
        "tree_version": d["tree_version"],
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
