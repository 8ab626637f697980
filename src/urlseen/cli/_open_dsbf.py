"""`urlseen dedup --filter dsbf`: open (or create) a splittable Bloom filter for the CLI."""

from __future__ import annotations

import click

from urlseen.cli._state import explicit
from urlseen.filters.dsbf import SplittableBloomFilter


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
    # Options left at their defaults do not contradict an existing shared filter's own.
    exists = redis_url is not None and SplittableBloomFilter.exists(redis_url, name)
    return SplittableBloomFilter(
        None if exists and not explicit(ctx, "capacity") else capacity,
        error_rate,
        redis=redis_url,
        name=name,
        leaf_bits=leaf_bits,
        layout=None if exists and not explicit(ctx, "layout") else layout,
    )
