"""`urlseen dedup --filter dsbf`: open (or create) a splittable Bloom filter for the CLI."""

from __future__ import annotations

import click

from urlseen.cli._state import explicit
from urlseen.filters.dsbf import DEFAULT_LEAF_BITS, SplittableBloomFilter


def open_dsbf(
    ctx: click.Context,
    redis_url: str | None,
    name: str,
    state: str | None,
    capacity: int,
    error_rate: float | None,
    leaf_bits: int | None,
    layout: str,
) -> SplittableBloomFilter:
    """Shared through Redis when --redis is given, else in this process's memory. An existing
    shared filter keeps its parameters; an explicit option that differs is an error (raised
    by the filter as ConfigError)."""
    if state is not None:
        raise click.UsageError("--filter dsbf keeps its state in Redis (--redis), not --state")

    if redis_url is not None and SplittableBloomFilter.exists(redis_url, name):
        return SplittableBloomFilter(
            capacity if explicit(ctx, "capacity") else None,
            error_rate,
            redis=redis_url,
            name=name,
            leaf_bits=leaf_bits,
            layout=layout if explicit(ctx, "layout") else None,
        )
    return SplittableBloomFilter(
        capacity,
        0.001 if error_rate is None else error_rate,
        redis=redis_url,
        name=name,
        leaf_bits=DEFAULT_LEAF_BITS if leaf_bits is None else leaf_bits,
        layout=layout,
    )
